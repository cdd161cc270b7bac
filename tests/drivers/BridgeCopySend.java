// Sends a copy of a message a node already delivered, as a Classic network bridge does when it
// sends again what it had not seen acknowledged: the original's JMS message id, under a producer
// of this connection, no redelivered flag. A node whose duplicate check never saw that id stores
// and delivers it as a new message (docs/broker-behaviour.md, "Copies made by a failed bridge").
// Run with Java's single-file launcher and the Classic distribution's client jars:
//   java -cp <jars> BridgeCopySend.java <openwire port> <user> <password> <queue> <message id> <loadgen_id> <body>
// Prints "SENT <message id>" once the node has accepted the copy (a synchronous send).
// Used by tests/test_pipelines.py.
import javax.jms.Session;
import org.apache.activemq.ActiveMQConnection;
import org.apache.activemq.ActiveMQConnectionFactory;
import org.apache.activemq.command.ActiveMQQueue;
import org.apache.activemq.command.ActiveMQTextMessage;
import org.apache.activemq.command.MessageId;
import org.apache.activemq.command.ProducerId;
import org.apache.activemq.command.ProducerInfo;
import org.apache.activemq.command.SessionId;
import org.apache.activemq.command.SessionInfo;

public class BridgeCopySend {
    public static void main(String[] args) throws Exception {
        ActiveMQConnectionFactory factory = new ActiveMQConnectionFactory(
                args[1], args[2], "tcp://127.0.0.1:" + args[0]);
        ActiveMQConnection connection = (ActiveMQConnection) factory.createConnection();
        connection.start();
        // A session and producer of this connection's own, as the bridge registers for its sends.
        SessionId session = new SessionId(connection.getConnectionInfo().getConnectionId(), 1);
        connection.syncSendPacket(new SessionInfo(session));
        ProducerId producer = new ProducerId(session, 1);
        connection.syncSendPacket(new ProducerInfo(producer));

        ActiveMQTextMessage copy = new ActiveMQTextMessage();
        copy.setText(args[6]);
        copy.setStringProperty("loadgen_id", args[5]);
        copy.setMessageId(new MessageId(args[4]));
        copy.setProducerId(producer);
        copy.setDestination(new ActiveMQQueue(args[3]));
        copy.setPersistent(true);
        copy.setResponseRequired(true);
        connection.syncSendPacket(copy);
        System.out.println("SENT " + copy.getJMSMessageID());
        connection.close();
    }
}
