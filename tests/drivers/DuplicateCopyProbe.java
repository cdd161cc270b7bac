// Sends a second copy of a message (the same JMS message id, from the same producer) to a Classic
// queue while a consumer still holds the first one unacknowledged, closes that consumer, and counts
// what the queue then delivers and what its node dead-letters. A node meets exactly this when a
// message it still holds comes back over a network bridge (a bridge's copy replayed to its origin
// after the consumer that attracted it went away).
// Run with Java's single-file launcher and the Classic distribution's client jars:
//   java -cp <jars> DuplicateCopyProbe.java <openwire port> <user> <password> <queue>
// Prints "DELIVERED <n> DEAD_LETTERED <m>": how often the message reached a consumer after the
// holder let it go, and how many of its copies are in ActiveMQ.DLQ.
// Used by tests/test_localcluster.py. No step waits on a clock: each waits for a message that
// only arrives once the broker has handled what came before it on the same queue.
import java.util.Enumeration;
import java.util.UUID;
import javax.jms.Connection;
import javax.jms.DeliveryMode;
import javax.jms.Message;
import javax.jms.MessageConsumer;
import javax.jms.MessageProducer;
import javax.jms.Queue;
import javax.jms.QueueBrowser;
import javax.jms.Session;
import javax.jms.TextMessage;
import org.apache.activemq.ActiveMQConnection;
import org.apache.activemq.ActiveMQConnectionFactory;
import org.apache.activemq.command.ActiveMQDestination;
import org.apache.activemq.command.ActiveMQMessage;
import org.apache.activemq.command.MessageId;

public class DuplicateCopyProbe {
    static final long WAIT_MS = 30000;

    public static void main(String[] args) throws Exception {
        // prefetch 1: the holder takes the original and nothing else
        ActiveMQConnectionFactory factory = new ActiveMQConnectionFactory(
                args[1], args[2], "tcp://127.0.0.1:" + args[0] + "?jms.prefetchPolicy.queuePrefetch=1");
        String probe = UUID.randomUUID().toString();
        ActiveMQConnection producing = (ActiveMQConnection) factory.createConnection();
        producing.start();
        Session session = producing.createSession(false, Session.AUTO_ACKNOWLEDGE);
        Queue queue = session.createQueue(args[3]);
        MessageProducer producer = session.createProducer(queue);
        producer.setDeliveryMode(DeliveryMode.PERSISTENT);
        TextMessage original = session.createTextMessage("original");
        original.setStringProperty("probe", probe);
        original.setStringProperty("role", "data");
        producer.send(original);

        Connection holding = factory.createConnection();
        holding.start();
        Session holdingSession = holding.createSession(false, Session.CLIENT_ACKNOWLEDGE);
        MessageConsumer holder = holdingSession.createConsumer(queue, "role = 'data'");
        require(holder.receive(WAIT_MS) != null, "the original was not delivered to the holder");

        // The copy, as a network bridge sends it: the original's id and producer.
        ActiveMQMessage copy = (ActiveMQMessage) ((ActiveMQMessage) original).copy();
        copy.setMessageId(new MessageId(original.getJMSMessageID()));
        copy.setProducerId(copy.getMessageId().getProducerId());
        copy.setDestination((ActiveMQDestination) queue);
        copy.setPersistent(true);
        producing.syncSendPacket(copy);
        // The queue pages messages in in order: once this marker is delivered, the copy was handled.
        sendMarker(session, producer, probe, "marker1");
        MessageConsumer markers = session.createConsumer(queue, "role = 'marker1'");
        require(markers.receive(WAIT_MS) != null, "marker1 was not delivered");
        markers.close();

        int deadLettered = 0;
        QueueBrowser dlq = session.createBrowser(session.createQueue("ActiveMQ.DLQ"), "probe = '" + probe + "'");
        for (Enumeration<?> e = dlq.getEnumeration(); e.hasMoreElements(); e.nextElement()) {
            deadLettered++;
        }
        dlq.close();

        holding.close();  // without acknowledging: the original goes back to the queue
        // A redelivered message is dispatched before newer ones: every delivery of the original
        // comes before marker2.
        sendMarker(session, producer, probe, "marker2");
        MessageConsumer reader = session.createConsumer(queue, "role IN ('data', 'marker2')");
        int delivered = 0;
        while (true) {
            Message m = reader.receive(WAIT_MS);
            require(m != null, "marker2 was not delivered");
            if ("marker2".equals(m.getStringProperty("role"))) {
                break;
            }
            delivered++;
        }
        System.out.println("DELIVERED " + delivered + " DEAD_LETTERED " + deadLettered);
        producing.close();
        System.exit(0);
    }

    static void sendMarker(Session session, MessageProducer producer, String probe, String role) throws Exception {
        TextMessage marker = session.createTextMessage(role);
        marker.setStringProperty("probe", probe);
        marker.setStringProperty("role", role);
        producer.send(marker);
    }

    static void require(boolean condition, String what) {
        if (!condition) {
            System.out.println("FAILED " + what);
            System.exit(2);
        }
    }
}
