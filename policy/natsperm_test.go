package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/natstest"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/fleet"
)

// TestFleetNATSPermissions: a real NATS server started from the
// configuration the docs show (deploy/nats/fleet.conf): replicas as its
// replica user run the whole fleet (a hook job through the queue, a
// fleet-wide slot, a cancel asked of another replica, the audit feed); the
// auditor user reads the feed but may not publish a job, ask a cancel, or
// read the jobs' queue; a connection without a user is refused.
func TestFleetNATSPermissions(t *testing.T) {
	watchdog(t, 60*time.Second)
	t.Setenv("REPLICA_PASSWORD", "replica-pw")
	t.Setenv("AUDITOR_PASSWORD", "auditor-pw")
	ns := natstest.RunConfig(t, "../deploy/nats/fleet.conf")
	as := func(user, pw string) string {
		u, _ := url.Parse(ns.ClientURL())
		u.User = url.UserPassword(user, pw)
		return u.String()
	}
	if nc, err := nats.Connect(ns.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("a connection without a user was accepted")
	}
	violations := make(chan string, 16)
	auditor, err := nats.Connect(as("auditor", "auditor-pw"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		violations <- err.Error()
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer auditor.Close()
	feed, err := auditor.SubscribeSync("mcp-cancel-proxy.audit")
	if err != nil {
		t.Fatal(err)
	}
	auditor.Flush()

	rc, hook := newFleetReceiver(t, func(int) int { return 200 })
	p := fleetPolicy(hook, 0)
	p.Rules = append(p.Rules, Rule{Tool: "slot", MaxConcurrent: 1, MaxConcurrentScope: "cluster"})
	a, qa, _ := replica(t, as("replica", "replica-pw"), p, t.TempDir())
	_, qb, _ := replica(t, as("replica", "replica-pw"), p, t.TempDir())
	cancelled(t, a, 1, "job")
	<-rc.got // run by either replica
	if _, err := feed.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("the auditor reads no audit line: %v", err)
	}
	ft := newTransport(t, a)
	if o := ft.client(call(2, "slot", "")); !o.Hold {
		t.Fatal("a fleet-counted request was not held for its slot")
	}
	if act := ft.next(); act.kind != "dispatch" {
		t.Fatalf("the fleet-wide slot: %s, want the request sent", act.kind)
	}
	stop := qb.ServeCancels(func(string, []byte) bool { return true }, func(string) bool { return false })
	defer stop()
	if !qa.AskCancel("session", []byte(`{}`)) {
		t.Error("a replica's cancel was not answered by the other")
	}

	job, _ := json.Marshal(hostileJobs(t, "/nonexistent")[1])
	auditor.Publish(fleet.JobSubject, job)
	auditor.Publish(fleet.CancelSubject+".session", []byte(`{}`))
	auditor.Flush()
	for _, subject := range []string{fleet.JobSubject, fleet.CancelSubject + ".session"} {
		select {
		case v := <-violations:
			if !strings.Contains(v, "Permissions Violation for Publish to \""+subject+"\"") {
				t.Errorf("auditor's publish to %s: %s", subject, v)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the auditor's publish to %s was not refused", subject)
		}
	}
	if _, err := auditor.Request("$JS.API.CONSUMER.MSG.NEXT."+fleet.StreamName+"."+fleet.ConsumerName, nil, time.Second); err == nil {
		t.Error("the auditor took a job from the queue")
	}
	if _, err := auditor.SubscribeSync(fleet.CancelSubject + ".*"); err == nil {
		auditor.Flush()
		select {
		case v := <-violations:
			if !strings.Contains(v, "Permissions Violation for Subscription") {
				t.Errorf("auditor's subscription to the cancels: %s", v)
			}
		case <-time.After(10 * time.Second):
			t.Error("the auditor may listen to the fleet's cancels")
		}
	} else if !errors.Is(err, nats.ErrPermissionViolation) {
		t.Error(fmt.Errorf("subscribe: %w", err))
	}
}
