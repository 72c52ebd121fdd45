//go:build unix

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/natstest"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/fleet"
)

// roundRobin is a load balancer with no session affinity: each request
// goes to the next replica.
func roundRobin(t *testing.T, replicas []string) string {
	var next atomic.Int64
	proxies := make([]*httputil.ReverseProxy, len(replicas))
	for i, r := range replicas {
		u, _ := url.Parse("http://" + r)
		proxies[i] = httputil.NewSingleHostReverseProxy(u)
		proxies[i].FlushInterval = -1 // event streams as they come
	}
	lb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxies[(next.Add(1)-1)%int64(len(proxies))].ServeHTTP(w, r)
	}))
	t.Cleanup(lb.Close)
	return lb.URL + "/mcp"
}

// replicaSet is three sidecar processes in one fleet in front of one example
// server, behind a round-robin balancer.
type replicaSet struct {
	lb       string     // the balancer's endpoint
	fronts   []string   // each replica's address
	replicas []*wrapped // each replica's process
	server   *logTail   // the example server's log
}

// startFleet starts the example server over Streamable HTTP and three
// sidecars with the configuration cfg in front of it.
func startFleet(t *testing.T, cfg string) *replicaSet {
	up := freePort(t)
	server := exec.Command(proxyBin, "example-server", "--http", up)
	serverLog, _ := server.StderrPipe()
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Process.Kill(); server.Wait() })
	f := &replicaSet{server: newLogTail(serverLog)}
	waitListening(t, up)
	for range 3 {
		front := freePort(t)
		sc := startWrapped(t, "--config", cfg, "--listen", front, "--upstream", "http://"+up+"/mcp")
		t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
		sc.events.waitFor(t, events.SidecarListening)
		f.fronts, f.replicas = append(f.fronts, front), append(f.replicas, sc)
	}
	f.lb = roundRobin(t, f.fronts)
	t.Cleanup(func() {
		if t.Failed() {
			for i, r := range f.replicas {
				t.Logf("replica %d's log:\n%s", i, r.logs.all())
			}
			t.Logf("server's log:\n%s", f.server.all())
		}
	})
	return f
}

// webhookFleet starts a fleet on the NATS server at natsURL whose block
// tool's on_cancel POSTs to a webhook receiver that succeeds.
func webhookFleet(t *testing.T, natsURL string) (*hookReceiver, *replicaSet) {
	rc, hookURL := newHookReceiver(t)
	rc.set(false)
	cfg, _ := webhookConfig(t, hookURL, `
cluster:
  nats: "`+natsURL+`"`, "")
	return rc, startFleet(t, cfg)
}

// open starts a session through the balancer (initialize on one replica,
// initialized on the next) and returns its id.
func (f *replicaSet) open(t *testing.T) string {
	resp := mcpPost(t, f.lb, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	mcpPost(t, f.lb, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	return session
}

// block calls the example server's block tool with key, as request id,
// through url, and returns the call's stream.
func block(t *testing.T, url, session string, id int, key string) <-chan string {
	return sseMessages(mcpPost(t, url, session, fmt.Sprintf(
		`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"block","arguments":{"key":%q},"_meta":{"progressToken":"p%d"}}}`, id, key, id)))
}

// cancel POSTs the cancel of request id through url.
func cancel(t *testing.T, url, session string, id int) {
	mcpPost(t, url, session, fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, id)).Body.Close()
}

// release answers the block call of key.
func release(t *testing.T, url, session, key string) {
	mcpPost(t, url, session, `{"jsonrpc":"2.0","id":999,"method":"tools/call","params":{"name":"release","arguments":{"key":"`+key+`"}}}`).Body.Close()
}

// TestE2EFleetNoAffinity: three sidecar processes in one fleet (a real
// NATS server) in front of one server, behind a round-robin balancer with
// no session affinity. A long call streams through one replica; its cancel
// lands on another: the server receives the cancel, the hook runs once,
// and the late answer (the server answers once released) never reaches
// the client.
func TestE2EFleetNoAffinity(t *testing.T) {
	t.Parallel()
	ns := natstest.Run(t, -1)
	rc, f := webhookFleet(t, ns.ClientURL())
	session := f.open(t)                        // replicas 0 and 1
	stream := block(t, f.lb, session, 2, "far") // replica 2 holds the call
	<-stream                                    // progress: the call runs
	cancel(t, f.lb, session, 2)                 // replica 0
	f.server.waitFor(t, "block far: the request was cancelled")
	f.replicas[2].events.waitFor(t, events.FleetStray)
	<-rc.hit // the hook ran
	release(t, f.lb, session, "far")
	noLateAnswerNorHook(t, stream, 2, rc, f.replicas[2], ns.ClientURL())
}

// noLateAnswerNorHook reads a cancelled call's stream to its end: no answer
// to request id may come; then no further hook may run. Proved without a
// window: once the call's story is over (its audit line, from holder, the
// replica that held the call) no replica publishes a job for it, and once
// the fleet's queue has nothing pending nor unacknowledged (a real
// nats-server's consumer state) every job published has run, its hook hit
// before its ack: a second hit would be in rc already.
func noLateAnswerNorHook(t *testing.T, stream <-chan string, id int, rc *hookReceiver, holder *wrapped, natsURL string) {
	t.Helper()
	for m := range stream {
		if strings.Contains(m, fmt.Sprintf(`"id":%d`, id)) {
			t.Errorf("the client got the late answer: %s", m)
		}
	}
	holder.logs.waitFor(t, fmt.Sprintf(`"id":%d,`, id), `"status":"`) // the audit line: the story is over
	queueIdle(t, natsURL)
	select {
	case <-rc.hit:
		t.Error("a hook ran twice")
	default:
	}
}

// queueIdle waits until the fleet's job queue has no job pending nor one
// delivered and not yet acknowledged.
func queueIdle(t *testing.T, natsURL string) {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, fleet.StreamName, fleet.ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(20 * time.Millisecond) // the server's state is asked for, not pushed
	defer tick.Stop()
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatalf("the fleet's queue: %v", err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the fleet's queue still holds jobs: %d pending, %d unacknowledged", info.NumPending, info.NumAckPending)
		}
	}
}

// TestE2EFleetClusterLimit: a cluster-scoped max_concurrent of 2 across
// three replicas, under more calls than slots, all through the balancer:
// the server never has a third block call in progress, and each release
// lets exactly one waiting call start, until every call is answered.
func TestE2EFleetClusterLimit(t *testing.T) {
	t.Parallel()
	ns := natstest.Run(t, -1)
	cfg, _ := writeConfig(t, `
cluster:
  nats: "`+ns.ClientURL()+`"
policy:
  rules:
    - tool: block
      max_concurrent: 2
      max_concurrent_scope: cluster
`)
	f := startFleet(t, cfg)
	session := f.open(t)
	const calls = 8
	answered := make(chan int, calls) // the id of each call answered
	for i := range calls {
		// A call waiting for a slot gets its response headers once it is
		// sent: each waits on its own goroutine.
		go func() {
			resp, err := http.DefaultClient.Do(mcpRequest(f.lb, session, fmt.Sprintf(
				`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"block","arguments":{"key":"k%d"}}}`, 10+i, i)))
			if err != nil {
				answered <- -1
				return
			}
			id := -1
			for m := range sseMessages(resp) {
				if strings.Contains(m, fmt.Sprintf(`"id":%d,`, 10+i)) && strings.Contains(m, `"result"`) {
					id = 10 + i
				}
			}
			answered <- id
		}()
	}
	released := map[string]bool{}
	releaseOne := func(started []string) {
		for _, line := range started {
			key, _, _ := strings.Cut(strings.SplitN(line, "block ", 2)[1], ":")
			if !released[key] {
				released[key] = true
				release(t, f.lb, session, key)
				return
			}
		}
	}
	for n := 2; n <= calls; n++ {
		releaseOne(f.server.waitCount(t, n, "started,")) // one at a time: the next waiting call may start
	}
	releaseOne(f.server.waitCount(t, calls, "started,"))
	for range calls {
		if id := <-answered; id < 0 {
			t.Error("a call got no answer")
		}
	}
	for _, line := range f.server.waitCount(t, calls, "started,") {
		if !strings.Contains(line, "1 in progress") && !strings.Contains(line, "2 in progress") {
			t.Errorf("over the cluster's limit of 2: %s", line)
		}
	}
}

// hookPipes makes the FIFOs an exec hook talks through in dir: events, on
// which each attempt says "start PPID KEY" and "done PPID KEY" (PPID being
// the replica running it), and release, a line on which ends an attempt.
// It returns the events read and the release FIFO, open.
func hookPipes(t *testing.T, dir string) (<-chan []string, *os.File) {
	var ends [2]*os.File
	for i, name := range []string{"events", "release"} {
		path := filepath.Join(dir, name)
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
		// Read and written both ways, so neither side waits for the other
		// to open it, nor sees its end when an attempt dies.
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		ends[i] = f
	}
	events := make(chan []string, 16)
	go func() {
		sc := bufio.NewScanner(ends[0])
		for sc.Scan() {
			events <- strings.Fields(sc.Text())
		}
	}()
	return events, ends[1]
}

// pipeHook is an on_cancel exec hook that speaks through hookPipes.
const pipeHook = `
policy:
  late_window: 1s
  rules:
    - tool: block
      on_cancel:
        exec: ["sh", "-c", 'echo "start $PPID $MCP_CANCEL_IDEMPOTENCY_KEY" > $DIR/events; read x < $DIR/release; echo "done $PPID $MCP_CANCEL_IDEMPOTENCY_KEY" > $DIR/events']
        timeout: 60s
        retries: 3
`

// TestE2EFleetReplicaDiesMidHook: the replica running a cancel's hook
// from the fleet's queue is killed with SIGKILL mid-attempt (its hook dies
// with it); after the ack wait another replica runs the job, with the same
// idempotency key, once.
func TestE2EFleetReplicaDiesMidHook(t *testing.T) {
	t.Parallel()
	ns := natstest.Run(t, -1)
	cfg, dir := writeConfig(t, `
cluster:
  nats: "`+ns.ClientURL()+`"
  ack_wait: 2s`+pipeHook)
	events, releaseHook := hookPipes(t, dir)
	f := startFleet(t, cfg)
	session := f.open(t)
	<-block(t, f.lb, session, 2, "k") // progress: the call runs
	cancel(t, f.lb, session, 2)
	first := <-events
	victim := f.replicaOf(t, first)
	victim.cmd.Process.Kill()
	<-victim.exited
	second := <-events
	if f.replicaOf(t, second) == victim || second[0] != "start" || second[2] != first[2] {
		t.Fatalf("after the kill: %q, want another replica to start the job with key %s", second, first[2])
	}
	releaseHook.WriteString("go\n")
	if done := <-events; done[0] != "done" || done[1] != second[1] {
		t.Fatalf("%q, want the job done by %s", done, second[1])
	}
	// Once the job is acknowledged and the queue holds nothing to deliver,
	// it cannot run again; a run that had begun would still hold it (its
	// hook waits for a release that never comes), and would have said so.
	queueIdle(t, ns.ClientURL())
	select {
	case ev := <-events:
		t.Errorf("the job ran again: %q", ev)
	default:
	}
}

// replicaOf returns the replica whose pid an event of hookPipes names.
func (f *replicaSet) replicaOf(t *testing.T, ev []string) *wrapped {
	for _, r := range f.replicas {
		if len(ev) == 3 && strconv.Itoa(r.cmd.Process.Pid) == ev[1] {
			return r
		}
	}
	t.Fatalf("hook event %q names no replica", ev)
	return nil
}

// TestE2EFleetNATSRestart: NATS stops mid-run. A call cancelled through
// the replica that holds it is cancelled upstream all the same, and its
// hook job is kept in that replica's store; once NATS is back the job goes
// to the fleet and runs, once, and a cancel sent to another replica than
// the call's finds it again.
func TestE2EFleetNATSRestart(t *testing.T) {
	t.Parallel()
	natsDir := t.TempDir()
	ns := natstest.RunIn(t, -1, natsDir)
	port := ns.Addr().(*net.TCPAddr).Port
	rc, f := webhookFleet(t, ns.ClientURL())
	session := f.open(t)
	ns.Shutdown()
	ns.WaitForShutdown()
	for _, r := range f.replicas {
		r.events.waitFor(t, events.FleetLost)
	}
	one := "http://" + f.fronts[1] + "/mcp"
	<-block(t, one, session, 2, "down")
	cancel(t, one, session, 2)
	f.server.waitFor(t, "block down: the request was cancelled")
	f.replicas[1].events.waitFor(t, events.FleetUnreachable)
	back := natstest.RunIn(t, port, natsDir)
	for _, r := range f.replicas {
		r.events.waitFor(t, events.FleetBack)
	}
	<-rc.hit // the kept job ran
	release(t, one, session, "down")
	// A cancel through another replica than the call's finds it again.
	stream := block(t, "http://"+f.fronts[2]+"/mcp", session, 3, "up")
	<-stream
	cancel(t, "http://"+f.fronts[0]+"/mcp", session, 3)
	f.server.waitFor(t, "block up: the request was cancelled")
	<-rc.hit
	release(t, one, session, "up")
	noLateAnswerNorHook(t, stream, 3, rc, f.replicas[2], back.ClientURL())
}
