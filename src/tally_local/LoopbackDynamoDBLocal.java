// DynamoDB Local bound to one address (loopback) instead of every interface.
//
// DynamoDB Local has no bind-address option: its DynamoDBProxyServer builds a Jetty Server from a port
// alone, which listens on all interfaces. This launcher builds the server exactly as DynamoDB Local's own
// main does (ServerRunner.createServerFromCommandLineArgs, the same command-line options), sets the host
// of its Jetty connectors before the server starts, and starts it.
//
// Usage: java -cp DynamoDBLocal.jar:<this class> LoopbackDynamoDBLocal HOST <DynamoDB Local options>
import java.lang.reflect.Field;
import java.util.Arrays;
import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import software.amazon.dynamodb.services.local.main.ServerRunner;
import software.amazon.dynamodb.services.local.server.DynamoDBProxyServer;

public final class LoopbackDynamoDBLocal {
    public static void main(String[] args) throws Exception {
        String host = args[0];
        String[] options = Arrays.copyOfRange(args, 1, args.length);
        DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(options);
        Field field = DynamoDBProxyServer.class.getDeclaredField("server");
        field.setAccessible(true);
        Server server = (Server) field.get(proxy);
        Connector[] connectors = server.getConnectors();
        if (connectors.length == 0) {
            throw new IllegalStateException("DynamoDB Local's server has no connector to bind");
        }
        for (Connector connector : connectors) {
            ((ServerConnector) connector).setHost(host);
        }
        proxy.start();
    }
}
