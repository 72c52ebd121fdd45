package policy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/natstest"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/fleet"
)

// replica is one proxy of a fleet: its engine, on NATS at url.
func replica(t *testing.T, url string, p Policy, store string) (*Engine, *fleet.Queue, <-chan *Record) {
	t.Helper()
	return replicaWith(t, fleet.Options{URL: url, AckWait: time.Second, Lease: time.Second}, p, store)
}

// replicaWith is replica with the queue's options o.
func replicaWith(t *testing.T, o fleet.Options, p Policy, store string) (*Engine, *fleet.Queue, <-chan *Record) {
	t.Helper()
	o.Logger = zaptest.NewLogger(t)
	q, err := fleet.Dial(o)
	if err != nil {
		t.Fatal(err)
	}
	p.Hooks.Store = store
	recs := make(chan *Record, 16)
	e, err := New(Options{Policy: p, Audit: Audit{Path: "off", NATSSubject: "mcp-cancel-proxy.audit"}, Logger: zaptest.NewLogger(t), Fleet: q,
		OnAudit: func(r *Record) { recs <- r }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e, q, recs
}

// fleetReceiver is a webhook receiver: answer decides each request's
// status, given its number (from 1).
type fleetReceiver struct {
	mu     sync.Mutex
	keys   []string
	got    chan int
	answer func(n int) int
}

func newFleetReceiver(t *testing.T, answer func(n int) int) (*fleetReceiver, string) {
	rc := &fleetReceiver{got: make(chan int, 16), answer: answer}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	return rc, srv.URL
}

func (rc *fleetReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	rc.keys = append(rc.keys, r.Header.Get("Idempotency-Key"))
	n := len(rc.keys)
	rc.mu.Unlock()
	rc.got <- n
	w.WriteHeader(rc.answer(n))
}

func (rc *fleetReceiver) key(n int) string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.keys[n-1]
}

func fleetPolicy(url string, retries int) Policy {
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", OnCancel: &Hook{HTTP: &HTTPHook{URL: url}, Retries: retries, Backoff: 10 * time.Millisecond}}}
	return p
}

// waitStatus waits for an audit record with status.
func waitStatus(t *testing.T, recs <-chan *Record, status string) *Record {
	return waitStatusOf(t, recs, status, "")
}

// waitStatusOf waits for an audit record with status of the request with
// the given id (any, if empty), passing over others.
func waitStatusOf(t *testing.T, recs <-chan *Record, status, id string) *Record {
	t.Helper()
	for {
		if r := waitRecord(t, recs); r.Status == status && (id == "" || string(r.ID) == id) {
			return r
		}
	}
}

// TestFleetRunsQueuedHooks: a replica's hook goes to the fleet's queue
// (its request's audit line says queued), runs once on some replica (whose
// line says so), with a failed attempt retried through the queue; every
// line reaches the fleet's audit subject.
func TestFleetRunsQueuedHooks(t *testing.T) {
	watchdog(t, 60*time.Second)
	ns := natstest.Run(t, -1)
	sub, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	feed, _ := sub.SubscribeSync("mcp-cancel-proxy.audit")
	sub.Flush()
	rc, url := newFleetReceiver(t, func(n int) int { return map[bool]int{true: 500, false: 200}[n == 1] })
	a, _, recsA := replica(t, ns.ClientURL(), fleetPolicy(url, 2), "")
	_, _, recsB := replica(t, ns.ClientURL(), fleetPolicy(url, 2), "")
	cancelled(t, a, 1, "job")
	var queued, ran *Record // from either replica, in either order
	for queued == nil || ran == nil {
		var r *Record
		select {
		case r = <-recsA:
		case r = <-recsB:
		case <-time.After(20 * time.Second):
			t.Fatal("no audit of the queued hook and of its run")
		}
		switch r.Status {
		case StatusQueued:
			queued = r
		case StatusFleetOK:
			ran = r
		}
	}
	if !queued.Hooks[0].Queued {
		t.Errorf("the request's audit: %+v", queued)
	}
	if ran.Hooks[0].Attempts != 2 || ran.Tool != "job" {
		t.Fatalf("the run's audit: %+v", ran)
	}
	if rc.key(1) != rc.key(2) {
		t.Errorf("keys %q and %q: the retry must carry the first's", rc.key(1), rc.key(2))
	}
	statuses := map[string]bool{}
	for range 2 {
		msg, err := feed.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("fleet audit feed: %v", err)
		}
		var rec Record
		json.Unmarshal(msg.Data, &rec)
		statuses[rec.Status] = true
	}
	if !statuses[StatusQueued] || !statuses[StatusFleetOK] {
		t.Errorf("fleet audit feed: %v", statuses)
	}
	select {
	case n := <-rc.got:
		if n > 2 {
			t.Errorf("the hook ran %d times", n)
		}
	default:
	}
}

// TestFleetRedeliversADeadReplicasJob: a replica dies (its NATS connection
// gone) in the middle of an attempt; once the ack wait has passed another
// replica gets the job and runs it, with the same idempotency key, as
// attempt 2.
func TestFleetRedeliversADeadReplicasJob(t *testing.T) {
	watchdog(t, 60*time.Second)
	ns := natstest.Run(t, -1)
	hold := make(chan struct{})
	rc, url := newFleetReceiver(t, func(n int) int {
		if n == 1 {
			<-hold // the first attempt never ends while its replica lives
			return 500
		}
		return 200
	})
	defer close(hold)
	a, qa, _ := replica(t, ns.ClientURL(), fleetPolicy(url, 3), "")
	cancelled(t, a, 1, "job")
	<-rc.got // replica a is attempting
	qa.Close()
	_, _, recsB := replica(t, ns.ClientURL(), fleetPolicy(url, 3), "")
	r := waitStatus(t, recsB, StatusFleetOK)
	if r.Hooks[0].Attempts != 2 || rc.key(2) != rc.key(1) {
		t.Errorf("run by the other replica: %+v; keys %q, %q", r, rc.key(1), rc.key(2))
	}
}

// TestFleetKeepsJobsWhileNATSIsDown: with NATS unreachable a hook job is
// kept in the local store; once NATS is there it is forwarded and run.
func TestFleetKeepsJobsWhileNATSIsDown(t *testing.T) {
	watchdog(t, 60*time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	rc, url := newFleetReceiver(t, func(int) int { return 200 })
	e, _, recs := replica(t, fmt.Sprintf("nats://127.0.0.1:%d", port), fleetPolicy(url, 0), t.TempDir())
	cancelled(t, e, 1, "job")
	waitStatus(t, recs, StatusQueued)
	if all, _ := e.Jobs(); len(all) != 1 || all[0].State != "pending" {
		t.Fatalf("local store while NATS is down: %+v", all)
	}
	natstest.Run(t, port)
	waitStatus(t, recs, StatusFleetOK)
	<-rc.got
	// The forwarder forgets the job once the stream has it, which may be
	// after a worker has run it.
	waitFor(t, "the local store emptied", func() bool { all, _ := e.Jobs(); return len(all) == 0 })
}

// TestFleetMaxConcurrent: max_concurrent with scope cluster counts the
// fleet's requests: a replica's request waits while another replica's holds
// the one slot, and goes once it is answered; a replica that dies holding
// the slot gives it up when its lease passes; a request cancelled while it
// waits is never sent.
func TestFleetMaxConcurrent(t *testing.T) {
	watchdog(t, 60*time.Second)
	ns := natstest.Run(t, -1)
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", MaxConcurrent: 1, MaxConcurrentScope: "cluster"}}
	a, _, _ := replica(t, ns.ClientURL(), p, "")
	b, qb, _ := replica(t, ns.ClientURL(), p, "")
	onA, onB := newTransport(t, a), newTransport(t, b)
	sent := func(ft *fakeTransport, id int) {
		t.Helper()
		if act := ft.next(); act.kind != "dispatch" || act.call.ID().String() != fmt.Sprint(id) {
			t.Fatalf("got %s of %v, want request %d sent", act.kind, act.call, id)
		}
	}
	if o := onA.client(call(1, "job", "")); !o.Hold {
		t.Fatal("a fleet-counted request was not held for its slot")
	}
	sent(onA, 1)
	onB.client(call(2, "job", ""))
	onB.none() // the fleet's one slot is A's
	onA.server(result(1, `{}`))
	sent(onB, 2)
	onA.client(call(3, "job", ""))
	onA.none()
	qb.Close() // B dies holding the slot: its lease runs out
	sent(onA, 3)
	onA.client(call(4, "job", ""))
	onA.client(cancel(4))
	onA.server(result(3, `{}`))
	onA.none() // 4 was cancelled while waiting: never sent
}

// TestFleetSurvivesNATSRestart: NATS stops mid-run and starts again (same
// port, same store): a hook of a cancel made meanwhile is kept in the
// local store, then forwarded and run; nothing is lost.
func TestFleetSurvivesNATSRestart(t *testing.T) {
	watchdog(t, 60*time.Second)
	dir := t.TempDir()
	ns := natstest.RunIn(t, -1, dir)
	port := ns.Addr().(*net.TCPAddr).Port
	rc, url := newFleetReceiver(t, func(int) int { return 200 })
	e, _, recs := replica(t, ns.ClientURL(), fleetPolicy(url, 0), t.TempDir())
	cancelled(t, e, 1, "job")
	waitStatusOf(t, recs, StatusFleetOK, "1")
	<-rc.got
	ns.Shutdown()
	ns.WaitForShutdown()
	cancelled(t, e, 2, "job")
	waitStatusOf(t, recs, StatusQueued, "2")
	if all, _ := e.Jobs(); len(all) != 1 {
		t.Fatalf("local store while NATS is down: %+v", all)
	}
	natstest.RunIn(t, port, dir)
	waitStatusOf(t, recs, StatusFleetOK, "2")
	<-rc.got
	// The forwarder forgets the job once the stream has it, which may be
	// after a worker has run it.
	waitFor(t, "the local store emptied", func() bool { all, _ := e.Jobs(); return len(all) == 0 })
}
