#!/usr/bin/env bash
# Make sure the system tools the project needs are present: a Java 17+ runtime (brokers and
# Spark) and Maven (fetches the broker distributions from Maven Central). Installs them from
# Debian's packages when missing.
set -euo pipefail
missing=()
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v mvn  >/dev/null 2>&1 || missing+=(maven)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} from Debian packages" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
java -version 2>&1 | head -1
