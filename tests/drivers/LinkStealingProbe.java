// Opens two OpenWire connections with the same clientID to one broker port and prints whether
// the second was accepted (the broker stole the link) or refused ("already connected").
// Run with Java's single-file launcher and the Classic distribution's client jars:
//   java -cp <jars> LinkStealingProbe.java <port> <user> <password>
// Used by tests/test_localcluster.py: a network bridge reconnecting to a peer that still holds
// its old connection is the same situation.
import javax.jms.Connection;
import org.apache.activemq.ActiveMQConnectionFactory;

public class LinkStealingProbe {
    public static void main(String[] args) throws Exception {
        ActiveMQConnectionFactory factory =
                new ActiveMQConnectionFactory(args[1], args[2], "tcp://127.0.0.1:" + args[0]);
        Connection first = factory.createConnection();
        first.setClientID("clustermq-link-stealing-probe");
        first.start();
        Connection second = factory.createConnection();
        try {
            second.setClientID("clustermq-link-stealing-probe");
            second.start();
            System.out.println("ACCEPTED");
        } catch (javax.jms.JMSException e) {
            System.out.println("REFUSED " + e.getMessage());
        }
        System.exit(0);
    }
}
