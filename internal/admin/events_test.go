package admin

import (
	"bufio"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/metrics"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
)

// TestEventsAreFollowed: GET /events streams the feed from the moment it
// is followed, one JSON line an event, and the listener's stop ends the
// stream (Serve's stop would wait for it for ever otherwise).
func TestEventsAreFollowed(t *testing.T) {
	feed, err := events.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()
	mine := feed.Subscribe(8) // to learn the listener's address from its own event
	log := zap.New(feed.Core())
	var engine atomic.Pointer[policy.Engine]
	stop, err := Serve(config.HTTP{Admin: "127.0.0.1:0"}, metrics.New(metrics.Gauges{}), func() error { return nil }, &engine, feed, log)
	if err != nil {
		t.Fatal(err)
	}
	var ready struct{ Event, Admin string }
	if err := json.Unmarshal(<-mine.Lines(), &ready); err != nil || ready.Event != string(events.AdminListening) {
		t.Fatalf("the first event is %+v (%v), want admin_listening", ready, err)
	}
	mine.Stop()

	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get("http://" + ready.Admin + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "application/x-ndjson" {
		t.Fatalf("GET /events: %d %q", resp.StatusCode, ct)
	}
	log.Info("not an event")
	log.Debug("late answer kept back", events.Mark(events.Suppressed), zap.String("id", "7"))
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() {
		t.Fatalf("the stream ended: %v", lines.Err())
	}
	var got struct{ Event, ID string }
	if err := json.Unmarshal(lines.Bytes(), &got); err != nil || got.Event != string(events.Suppressed) || got.ID != "7" {
		t.Fatalf("followed %s (%v), want the suppression of 7", lines.Bytes(), err)
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	if lines.Scan() {
		t.Errorf("after stop, the stream went on: %s", lines.Bytes())
	}
	<-stopped
}
