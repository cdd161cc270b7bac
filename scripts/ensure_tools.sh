#!/usr/bin/env bash
# Make sure the system tools the project needs are present: a Java 17+ runtime (brokers and
# Spark), Maven (fetches the broker distributions from Maven Central), and what pip needs to
# build python-qpid-proton from its sdist where no wheel fits (gcc, the Python headers, OpenSSL
# headers for its TLS). Installs them from Debian's packages when missing.
set -euo pipefail
missing=()
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v mvn  >/dev/null 2>&1 || missing+=(maven)
command -v gcc  >/dev/null 2>&1 || missing+=(gcc)
[ -f /usr/include/openssl/ssl.h ] || missing+=(libssl-dev)
"${PYTHON:-python3}" - <<'PY' || missing+=(python3-dev)
import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)
PY
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} from Debian packages" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
java -version 2>&1 | head -1
