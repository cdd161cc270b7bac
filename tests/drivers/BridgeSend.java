// Sends one message to a node the way a Classic network bridge delivers one, for the shapes a
// network makes that no ordinary producer can:
// * a copy of a message a node already delivered (a failed bridge sends again what it had not
//   seen acknowledged): the original's JMS message id, no redelivered flag. A node whose
//   duplicate check never saw that id stores and delivers it as a new message
//   (docs/broker-behaviour.md, "Copies made by a failed bridge");
// * a message of a JMS group that came from a peer: the peer's brokerId in its broker path, so
//   the node's bridge back to that peer may not carry it (the network's loop check), and a group
//   the node pinned to that bridge consumer goes to nobody (docs/broker-behaviour.md, "A group
//   pinned to a bridge that may not carry its message").
// Run with Java's single-file launcher and the Classic distribution's client jars:
//   java -cp <jars> BridgeSend.java <openwire port> <user> <password> <queue> <loadgen_id> <body> <message id|-> <group|-> <peer brokerId|->
// ("-": a new message id, no group, no broker path). Prints "SENT <message id>" once the node
// has accepted it (a synchronous send). Used by tests/test_pipelines.py and tests/test_jms_interop.py.
import org.apache.activemq.ActiveMQConnection;
import org.apache.activemq.ActiveMQConnectionFactory;
import org.apache.activemq.command.ActiveMQQueue;
import org.apache.activemq.command.ActiveMQTextMessage;
import org.apache.activemq.command.BrokerId;
import org.apache.activemq.command.MessageId;
import org.apache.activemq.command.ProducerId;
import org.apache.activemq.command.ProducerInfo;
import org.apache.activemq.command.SessionId;
import org.apache.activemq.command.SessionInfo;

public class BridgeSend {
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

        ActiveMQTextMessage message = new ActiveMQTextMessage();
        message.setText(args[5]);
        message.setStringProperty("loadgen_id", args[4]);
        message.setMessageId(args[6].equals("-") ? new MessageId(producer, 1) : new MessageId(args[6]));
        if (!args[7].equals("-")) {
            message.setGroupID(args[7]);
        }
        if (!args[8].equals("-")) {
            message.setBrokerPath(new BrokerId[] {new BrokerId(args[8])});
        }
        message.setProducerId(producer);
        message.setDestination(new ActiveMQQueue(args[3]));
        message.setPersistent(true);
        message.setResponseRequired(true);
        connection.syncSendPacket(message);
        System.out.println("SENT " + message.getJMSMessageID());
        connection.close();
    }
}
