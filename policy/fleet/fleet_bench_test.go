package fleet_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/natstest"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/fleet"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/jobs"
)

// BenchmarkPublish: one hook job handed to the fleet's queue (a JetStream
// publish acknowledged once stored on disk), on an in-process NATS server.
func BenchmarkPublish(b *testing.B) {
	ns := natstest.Run(b, -1)
	q, err := fleet.Dial(fleet.Options{URL: ns.ClientURL()})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	j := jobs.Job{Phase: "on_cancel", Target: "POST http://127.0.0.1:1/", HookDigest: "sha256:0", Event: []byte(`{"event":"cancel"}`),
		State: jobs.Pending, Created: time.Now()}
	for i := 0; b.Loop(); i++ {
		j.ID = "bench-" + strconv.Itoa(i)
		if err := q.Publish(j); err != nil {
			b.Fatal(err)
		}
	}
}
