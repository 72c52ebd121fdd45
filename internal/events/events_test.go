package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logger is a logger at warn level, sampled like the proxy's, with the
// feed teed beside it; log collects what it writes.
func logger(f *Feed, log *bytes.Buffer) *zap.Logger {
	own := zapcore.NewSamplerWithOptions(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
		zapcore.AddSync(log), zapcore.WarnLevel), 1e9, 1, 1000)
	return zap.New(zapcore.NewTee(own, f.Core()))
}

// closeAndRead closes the feed f, which writes path, and returns the
// events the file holds.
func closeAndRead(t *testing.T, f interface{ Close() error }, path string) []map[string]any {
	t.Helper()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return lines(t, b)
}

func lines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestFileHasMarkedEntriesAtEveryLevel: the file gets every marked entry,
// below the log's level and beyond its sampling, with its context fields,
// and nothing unmarked.
func TestFileHasMarkedEntriesAtEveryLevel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events")
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var own bytes.Buffer
	log := logger(f, &own).With(zap.String("session", "s1"))
	log.Debug("suppressed", Mark(Suppressed), zap.String("id", "2"))
	log.Info("not an event")
	for range 3 {
		log.Warn("sending SIGKILL", Mark(ServerSignalled), zap.String("signal", "SIGKILL"))
	}
	log.With(Mark(SessionIdle)).Info("session idle")
	got := closeAndRead(t, f, path)
	want := []Name{Suppressed, ServerSignalled, ServerSignalled, ServerSignalled, SessionIdle}
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d: %v", len(got), len(want), got)
	}
	for i, m := range got {
		if m[Key] != string(want[i]) || m["session"] != "s1" || m["time"] == nil {
			t.Errorf("event %d = %v, want %s with session s1 and a time", i, m, want[i])
		}
		at, _ := m["time"].(string)
		if _, err := time.Parse(time.RFC3339Nano, at); err != nil || len(at) != len("2006-01-02T15:04:05.000000000Z") {
			t.Errorf("event %d's time %q is not RFC 3339 in UTC to the nanosecond: %v", i, at, err)
		}
	}
	if got[0]["id"] != "2" {
		t.Errorf("the suppression's fields were lost: %v", got[0])
	}
	if n := len(lines(t, own.Bytes())); n != 1 { // the log's sampler let one warning through
		t.Errorf("the log itself has %d lines, want 1 (its level and sampling unchanged):\n%s", n, own.Bytes())
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the file's mode is %v (%v), want 0600", fi.Mode(), err)
	}
}

// TestIdleFeedIsDisabled: with neither a file nor a subscriber the core is
// off (a debug line's fields are never built); a subscriber turns it on,
// and its end off again.
func TestIdleFeedIsDisabled(t *testing.T) {
	f, err := Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := f.Core()
	if c.Enabled(zapcore.DebugLevel) {
		t.Fatal("a feed nobody follows is enabled")
	}
	s := f.Subscribe(4)
	if !c.Enabled(zapcore.DebugLevel) {
		t.Fatal("a followed feed is disabled")
	}
	log := zap.New(c)
	log.Debug("x", Mark(HookRan), zap.String("tool", "t"))
	log.Debug("y")
	line := <-s.Lines()
	if m := lines(t, line); len(m) != 1 || m[0][Key] != string(HookRan) || m[0]["tool"] != "t" {
		t.Errorf("the subscriber got %s", line)
	}
	s.Stop()
	s.Stop() // twice is harmless
	if c.Enabled(zapcore.DebugLevel) {
		t.Fatal("the feed stayed enabled after its only follower left")
	}
}

// TestSlowSubscriberDropsNotBlocks: a subscriber that does not read loses
// events, counted, and never holds the logger up; Close ends it.
func TestSlowSubscriberDropsNotBlocks(t *testing.T) {
	f, _ := Open("")
	s := f.Subscribe(1)
	log := zap.New(f.Core())
	for range 5 {
		log.Info("x", Mark(Dropped))
	}
	if d := f.Dropped(); d != 4 {
		t.Errorf("dropped %d, want 4", d)
	}
	f.Close()
	n := 0
	for range s.Lines() {
		n++
	}
	if n != 1 {
		t.Errorf("the subscriber got %d lines, want the 1 it had room for", n)
	}
	s.Stop() // after Close: harmless
	if f.Subscribe(1) != nil {
		t.Error("a closed feed took a subscriber")
	}
	var nilFeed *Feed
	if err := nilFeed.Close(); err != nil || nilFeed.Core().Enabled(zapcore.ErrorLevel) {
		t.Error("a nil feed is not a quiet one")
	}
}

// TestFeedBoundPerSession: of one session's events about messages a peer
// can send without end (suppressed), at most the bound are written in a
// window; the rest are left out and counted, and the session's first such
// event of its next window is preceded by events_left_out with the count.
// Another session, and the session's other events (a cancel accepted),
// are not touched. Before, every event was written: 200,000 suppressed
// messages made 59 MB.
func TestFeedBoundPerSession(t *testing.T) {
	f, _ := Open("")
	defer f.Close()
	f.bound.perSession = 3
	s := f.Subscribe(64)
	c := f.Core()
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	write := func(session string, at time.Time) {
		c.With([]zapcore.Field{zap.String("session", session)}).Write(zapcore.Entry{Time: at, Message: "m"}, []zapcore.Field{Mark(Suppressed)})
	}
	for range 5 {
		write("s1", t0)
	}
	c.With([]zapcore.Field{zap.String("session", "s1")}).Write(zapcore.Entry{Time: t0, Message: "m"}, []zapcore.Field{Mark(CancelAccepted)})
	write("s2", t0)
	write("s1", t0.Add(DefaultWindow))
	f.Close()
	var got []string
	for line := range s.Lines() {
		m := lines(t, line)[0]
		got = append(got, fmt.Sprint(m["session"], " ", m[Key], " ", m["left_out"]))
	}
	want := []string{"s1 suppressed <nil>", "s1 suppressed <nil>", "s1 suppressed <nil>", "s1 cancel_accepted <nil>", "s2 suppressed <nil>",
		"s1 events_left_out 2", "s1 suppressed <nil>"}
	if !slices.Equal(got, want) {
		t.Errorf("the feed has\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if d := f.Dropped(); d != 2 {
		t.Errorf("dropped %d, want 2", d)
	}
}

// TestFileWrittenWholeAtClose: the file is written by the feed's own
// goroutine; every event published before Close is in it once Close has
// returned, each publisher's in its order, none torn, however many
// publishers there were and however far the writer fell behind.
func TestFileWrittenWholeAtClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events")
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	log := zap.New(f.Core())
	const publishers, each = 4, 5000
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() {
			for i := range each {
				log.Info("hook ran", Mark(HookRan), zap.Int("p", p), zap.Int("i", i), zap.String("pad", strings.Repeat("x", 200)))
			}
		})
	}
	wg.Wait()
	got := closeAndRead(t, f, path)
	if len(got) != publishers*each {
		t.Fatalf("%d events in the file, want %d", len(got), publishers*each)
	}
	next := make([]float64, publishers)
	for _, m := range got {
		p, i := int(m["p"].(float64)), m["i"].(float64)
		if i != next[p] {
			t.Fatalf("publisher %d's event %v came where %v was due", p, i, next[p])
		}
		next[p]++
	}
	log.Info("after the end", Mark(HookRan)) // dropped, not a panic
}
