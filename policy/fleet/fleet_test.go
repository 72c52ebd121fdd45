package fleet_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/natstest"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/fleet"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/jobs"
)

func job(id string) jobs.Job {
	return jobs.Job{ID: id, Phase: "on_cancel", Target: "POST http://127.0.0.1:1/", HookDigest: "sha256:0",
		Event: []byte(`{"event":"cancel"}`), State: jobs.Pending, Created: time.Now()}
}

func dial(t *testing.T, url string, o fleet.Options) *fleet.Queue {
	t.Helper()
	o.URL = url
	q, err := fleet.Dial(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	return q
}

func admin(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestOperatorSettingsKept: a stream and a consumer an operator made (or
// changed) keep their settings when a replica starts; only the duplicate
// window, the ack wait and the delivery bound become the replica's.
func TestOperatorSettingsKept(t *testing.T) {
	ns := natstest.Run(t, -1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := admin(t, ns.ClientURL())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: fleet.StreamName, Subjects: []string{fleet.JobSubject},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: time.Minute, MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, fleet.StreamName, jetstream.ConsumerConfig{Durable: fleet.ConsumerName,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute, MaxAckPending: 7}); err != nil {
		t.Fatal(err)
	}
	q := dial(t, ns.ClientURL(), fleet.Options{AckWait: 42 * time.Second, MaxDeliver: 9})
	if err := q.Publish(job("1")); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, fleet.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.MaxAge != time.Hour || c.Duplicates != 10*time.Minute {
		t.Errorf("stream after a replica started: max age %v (want the operator's 1h), duplicates %v (want 10m)", c.MaxAge, c.Duplicates)
	}
	cons, err := js.Consumer(ctx, fleet.StreamName, fleet.ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	if c := cons.CachedInfo().Config; c.MaxAckPending != 7 || c.AckWait != 42*time.Second || c.MaxDeliver != 9 {
		t.Errorf("consumer after a replica started: max ack pending %d (want the operator's 7), ack wait %v (want 42s), max deliver %d (want 9)",
			c.MaxAckPending, c.AckWait, c.MaxDeliver)
	}
}

// TestReplicasStartTogether: replicas that start at once on an empty
// server all publish, and each job is in the stream once.
func TestReplicasStartTogether(t *testing.T) {
	ns := natstest.Run(t, -1)
	const n = 8
	qs := make([]*fleet.Queue, n)
	for i := range qs {
		qs[i] = dial(t, ns.ClientURL(), fleet.Options{})
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, q := range qs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- q.Publish(job(strconv.Itoa(i)))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := admin(t, ns.ClientURL()).Stream(ctx, fleet.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().State.Msgs; got != n {
		t.Errorf("the stream holds %d jobs, want %d", got, n)
	}
}

// TestPublishWhileDisconnected: with NATS unreachable a publish fails at
// once with ErrNotConnected (the job stays in the local store), rather
// than after waiting for an acknowledgement that cannot come.
func TestPublishWhileDisconnected(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + ln.Addr().String()
	ln.Close()
	q := dial(t, url, fleet.Options{})
	if err := q.Publish(job("1")); !errors.Is(err, fleet.ErrNotConnected) {
		t.Fatalf("publish while NATS is down: %v, want %v", err, fleet.ErrNotConnected)
	}
}
