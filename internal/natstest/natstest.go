// Package natstest runs a real NATS server with JetStream in a test's
// process: the fleet's tests use it in place of a mock. Only tests import it.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Run starts a NATS server with JetStream on 127.0.0.1:port (-1: any free
// port), its store in a temporary directory, until the test ends.
func Run(t testing.TB, port int) *server.Server { return RunIn(t, port, t.TempDir()) }

// RunIn is Run with JetStream's store in dir: a server started again on
// the same port and dir is the same server restarted.
func RunIn(t testing.TB, port int, dir string) *server.Server {
	t.Helper()
	return start(t, &server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
}

// start starts a server with o until the test ends.
func start(t testing.TB, o *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS did not start")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// RunConfig starts a NATS server from a configuration file, as nats-server
// -c would (its users and permissions included), on 127.0.0.1 at a free
// port with JetStream's store in a temporary directory, until the test
// ends. Variables the file names ($NAME) come from the environment.
func RunConfig(t testing.TB, file string) *server.Server {
	t.Helper()
	o, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatal(err)
	}
	o.Host, o.Port, o.StoreDir, o.NoLog, o.NoSigs = "127.0.0.1", -1, t.TempDir(), true, true
	o.HTTPPort, o.Cluster.Port, o.LeafNode.Port = 0, 0, 0
	return start(t, o)
}
