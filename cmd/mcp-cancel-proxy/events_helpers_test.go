package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fsnotify/fsnotify"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// withEvents puts --events FILE before a proxy mode's arguments (not a
// subcommand's), FILE a new file in the test's directory.
func withEvents(t testing.TB, args []string) []string {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args // a subcommand
	}
	for _, a := range args {
		if a == "--events" {
			return args
		}
		if a == "--" {
			break
		}
	}
	path := filepath.Join(t.TempDir(), "events.jsonl")
	return append([]string{"--events", path}, args...)
}

// eventsFor is args with --events FILE (withEvents), and FILE followed
// until the test ends: for a proxy a test starts by other means.
func eventsFor(t testing.TB, args []string) ([]string, *eventTail) {
	args = withEvents(t, args)
	stop := make(chan struct{})
	feed := followEvents(t, eventsPath(args), stop)
	t.Cleanup(func() { close(stop) })
	return args, feed
}

// eventsPath is the file that args give --events, or "".
func eventsPath(args []string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		if a == "--events" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// eventTail follows a proxy's events feed (its --events file) and lets a
// test wait for an event by its name and fields.
type eventTail struct{ lines *logTail }

// followEvents tails the events file at path until stop is closed (the
// proxy has exited) and the file is read to its end.
func followEvents(t testing.TB, path string, stop <-chan struct{}) *eventTail {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil { // there to watch before the proxy writes
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(path); err != nil {
		t.Fatal(err)
	}
	return &eventTail{lines: newLogTail(&follower{f: f, w: w, stop: stop})}
}

// follower reads a file that grows: at its end it waits for a write, or
// for stop, after which the end is the end.
type follower struct {
	f    *os.File
	w    *fsnotify.Watcher
	stop <-chan struct{}
	once sync.Once
}

func (r *follower) Read(p []byte) (int, error) {
	for {
		n, err := r.f.Read(p)
		if n > 0 || (err != nil && err != io.EOF) {
			return n, err
		}
		select {
		case <-r.w.Events:
		case err := <-r.w.Errors:
			r.close()
			return 0, err
		case <-r.stop:
			if n, _ := r.f.Read(p); n > 0 { // written before the proxy exited
				return n, nil
			}
			r.close()
			return 0, io.EOF
		}
	}
}

func (r *follower) close() { r.once.Do(func() { r.w.Close(); r.f.Close() }) }

// matchEvent is a match of the line of an event named name whose fields
// kv (name, value pairs) have those values, as fmt.Sprint prints them.
func matchEvent(name events.Name, kv []string) (func(string) bool, string) {
	what := fmt.Sprintf("event %s %v", name, kv)
	return func(line string) bool {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m[events.Key] != string(name) {
			return false
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if v, ok := m[kv[i]]; !ok || fmt.Sprint(v) != kv[i+1] {
				return false
			}
		}
		return true
	}, what
}

// waitFor blocks until the feed has an event named name with the fields kv
// (name, value pairs), and returns its fields.
func (e *eventTail) waitFor(t testing.TB, name events.Name, kv ...string) map[string]any {
	t.Helper()
	match, what := matchEvent(name, kv)
	return decodeEvent(t, e.lines.waitMatch(t, 1, match, what)[0])
}

// waitCount blocks until the feed has n such events, and returns the
// first n.
func (e *eventTail) waitCount(t testing.TB, n int, name events.Name, kv ...string) []map[string]any {
	t.Helper()
	match, what := matchEvent(name, kv)
	var out []map[string]any
	for _, l := range e.lines.waitMatch(t, n, match, what) {
		out = append(out, decodeEvent(t, l))
	}
	return out
}

// count is how many events named name with the fields kv the feed has so far.
func (e *eventTail) count(name events.Name, kv ...string) int {
	match, _ := matchEvent(name, kv)
	e.lines.mu.Lock()
	defer e.lines.mu.Unlock()
	n := 0
	for _, l := range e.lines.lines {
		if match(l) {
			n++
		}
	}
	return n
}

func decodeEvent(t testing.TB, line string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("an event that is not JSON: %q: %v", line, err)
	}
	return m
}
