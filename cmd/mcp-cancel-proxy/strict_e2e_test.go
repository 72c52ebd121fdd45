//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// strictCalls is how many calls TestE2EStrictClientRandomCancels makes on
// each transport, strictWindow how many at once.
const (
	strictCalls  = 1000
	strictWindow = 16
)

// TestE2EStrictClientRandomCancels: a client as strict as Claude Code (it
// would close its connection over an answer it cannot place, a second
// answer, or progress under a token it does not hold) makes 1,000 calls of
// the go-sdk example server's slow_honour (and of server-everything's
// long-running operation, through the wrapper), 16 at a time, and cancels about
// a third of them at random (at once, or at their first progress), through
// the wrapper, through the bridge, and as a Streamable HTTP client of the
// sidecar in front of the server over Streamable HTTP and over stdio (a
// session of lines). Every call ends with one answer or
// one cancel; nothing else comes, but for an answer or progress already on
// its way when the cancel reached the proxy, counted apart; and the proxy
// says so at its end: it accepted each cancel but those whose call it had
// answered already (the raced ones), and dropped those.
func TestE2EStrictClientRandomCancels(t *testing.T) {
	t.Run("wrapper", func(t *testing.T) {
		t.Parallel()
		strictClient(t, startWrapped(t, "--", proxyBin, "example-server"), slowHonour)
	})
	t.Run("wrapper-to-server-everything", func(t *testing.T) {
		// Node's server-everything ignores cancels: its call runs on,
		// reporting progress, and answers.
		t.Parallel()
		node, dir := nodePeers(t)
		everything := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
		strictClient(t, startWrapped(t, "--", node, everything, "stdio"), longRunning)
	})
	t.Run("bridge", func(t *testing.T) {
		t.Parallel()
		up := freePort(t)
		startServer(t, exec.Command(proxyBin, "example-server", "--http", up))
		waitListening(t, up)
		strictClient(t, startWrapped(t, "--upstream", "http://"+up+"/mcp"), slowHonour)
	})
	t.Run("sidecar-to-streamable", func(t *testing.T) {
		t.Parallel()
		run := startSidecarSession(t, nil, "--cancel-grace", "50ms")
		strictHTTPClient(t, run.url, run.session, run.sc.events)
	})
	t.Run("sidecar-to-stdio", func(t *testing.T) {
		t.Parallel()
		front := freePort(t)
		sc := startWrapped(t, "--listen", front, "--cancel-grace", "50ms", "--", proxyBin, "example-server")
		sc.events.waitFor(t, events.SidecarListening)
		url := "http://" + front + "/mcp"
		strictHTTPClient(t, url, openSession(t, url, "strict"), sc.events)
	})
}

// The calls of TestE2EStrictClientRandomCancels, given their id: the go-sdk
// example server's slow_honour, and server-everything's long-running
// operation, each 10 ms long in two steps of progress.
const (
	slowHonour  = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"slow_honour","arguments":{"seconds":0.01,"steps":2},"_meta":{"progressToken":"t%d"}}}`
	longRunning = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"trigger-long-running-operation","arguments":{"duration":0.01,"steps":2},"_meta":{"progressToken":"t%d"}}}`
)

// strictCall is one call of strictClient's, as the client sees it.
type strictCall struct {
	cancelled, answered, cancelOnProgress bool
}

// strictClient plays TestE2EStrictClientRandomCancels's calls through w:
// call, given an id twice, is the call.
func strictClient(t *testing.T, w *wrapped, call string) {
	w.initialize(`{}`)
	rng := rand.New(rand.NewPCG(41, 7))
	calls := map[int]*strictCall{}
	next, open, ended, cancels, raced, racedProgress := 100, 0, 0, 0, 0, 0
	cancel := func(id int) {
		calls[id].cancelled = true
		cancels++
		open--
		ended++
		w.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"strict"}}`, id))
	}
	fill := func() {
		for open < strictWindow && next < 100+strictCalls {
			id := next
			next++
			open++
			calls[id] = &strictCall{}
			w.send(fmt.Sprintf(call, id, id))
			switch rng.IntN(6) {
			case 0:
				cancel(id)
			case 1:
				calls[id].cancelOnProgress = true
			}
		}
	}
	fill()
	for ended < strictCalls {
		m := w.recv()
		switch {
		case m["method"] == "notifications/progress":
			tok, _ := m["params"].(map[string]any)["progressToken"].(string)
			id, err := strconv.Atoi(strings.TrimPrefix(tok, "t"))
			c := calls[id]
			switch {
			case err != nil || c == nil || c.answered:
				t.Fatalf("progress under a token the client does not hold: %v", m)
			case c.cancelled:
				racedProgress++
			case c.cancelOnProgress:
				cancel(id)
				fill()
			}
		case m["id"] != nil && m["method"] == nil:
			id, _ := m["id"].(float64)
			c := calls[int(id)]
			switch {
			case c == nil || c.answered:
				t.Fatalf("an answer the client cannot place: %v", m)
			case c.cancelled:
				c.answered = true
				raced++
			default:
				c.answered = true
				open--
				ended++
				fill()
			}
		}
	}
	// Nothing more comes: a ping's answer is the last frame, on a pipe
	// that keeps the order the proxy wrote in.
	w.send(`{"jsonrpc":"2.0","id":"last","method":"ping"}`)
	for m := w.recv(); m["id"] != "last"; m = w.recv() {
		if m["id"] != nil && m["method"] == nil { // an answer to a cancelled call, raced
			id, _ := m["id"].(float64)
			c := calls[int(id)]
			if c == nil || c.answered || !c.cancelled {
				t.Fatalf("after the last call: %v", m)
			}
			c.answered = true
			raced++
			continue
		}
		if m["method"] != "notifications/progress" {
			t.Fatalf("after the last call: %v", m)
		}
		racedProgress++
	}
	w.events.waitCount(t, cancels-raced, events.CancelAccepted, "from", "client")
	if n := w.events.count(events.CancelAccepted, "from", "client"); n != cancels-raced {
		t.Errorf("the proxy accepted %d cancels, want %d: %d cancels, %d of them after the answer was on its way",
			n, cancels-raced, cancels, raced)
	}
	t.Logf("%d calls: %d cancelled (%d of them answered all the same, on the way before the cancel; %d progress notifications likewise)",
		strictCalls, cancels, raced, racedProgress)
}

// strictHTTPClient plays TestE2EStrictClientRandomCancels's calls as a
// Streamable HTTP client of url's session, 16 at a time, each call on a
// stream of its own, whose every message must be about that call; feed is
// the sidecar's events feed.
func strictHTTPClient(t *testing.T, url, session string, feed *eventTail) {
	ids := make(chan int)
	go func() {
		for i := range strictCalls {
			ids <- 100 + i
		}
		close(ids)
	}()
	var mu sync.Mutex
	var total strictTally
	var wg sync.WaitGroup
	for w := range strictWindow {
		rng := rand.New(rand.NewPCG(41, uint64(w)))
		wg.Go(func() {
			for id := range ids {
				got, bad := strictHTTPCall(url, session, id, rng.IntN(6))
				mu.Lock()
				total.add(got)
				mu.Unlock()
				if bad != "" {
					t.Error(bad)
					for range ids { // the others' calls go on
					}
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	feed.waitCount(t, total.cancels-total.raced, events.CancelAccepted, "from", "client")
	if n := feed.count(events.CancelAccepted, "from", "client"); n != total.cancels-total.raced {
		t.Errorf("the proxy accepted %d cancels, want %d: %d cancels, %d of them after the answer was on its way",
			n, total.cancels-total.raced, total.cancels, total.raced)
	}
	t.Logf("%d calls: %d cancelled (%d of them answered all the same, on the way before the cancel; %d progress notifications likewise)",
		strictCalls, total.cancels, total.raced, total.racedProgress)
}

// strictTally counts what a strict client's calls saw.
type strictTally struct{ cancels, raced, racedProgress int }

func (s *strictTally) add(o strictTally) {
	s.cancels += o.cancels
	s.raced += o.raced
	s.racedProgress += o.racedProgress
}

// strictHTTPCall makes one call of strictHTTPClient's and reads its
// stream to the end: mode 0 cancels it at once, 1 at its first progress.
// It returns what it saw, and why a strict client would have closed its
// connection, if it would have.
func strictHTTPCall(url, session string, id, mode int) (got strictTally, bad string) {
	call := fmt.Sprintf(slowHonour, id, id)
	resp, err := http.DefaultClient.Do(mcpRequest(url, session, call))
	if err != nil {
		return got, fmt.Sprintf("call %d: %v", id, err)
	}
	cancelled := false
	cancel := func() {
		cancelled = true
		got.cancels++
		r, err := http.DefaultClient.Do(mcpRequest(url, session,
			fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"strict"}}`, id)))
		if err == nil {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
	}
	if mode == 0 {
		cancel()
	}
	answered := false
	for data := range sseMessages(resp) {
		var m struct {
			ID     *float64
			Method string
			Params struct{ ProgressToken any }
		}
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			return got, fmt.Sprintf("call %d: %q", id, data)
		}
		switch {
		case m.Method == "notifications/progress":
			if m.Params.ProgressToken != fmt.Sprintf("t%d", id) || answered {
				return got, fmt.Sprintf("call %d: progress under a token the client does not hold: %s", id, data)
			}
			if cancelled {
				got.racedProgress++
			} else if mode == 1 {
				cancel()
			}
		case m.ID != nil && m.Method == "":
			if int(*m.ID) != id || answered {
				return got, fmt.Sprintf("call %d: an answer the client cannot place: %s", id, data)
			}
			answered = true
			if cancelled {
				got.raced++
			}
		}
	}
	if !answered && !cancelled {
		return got, fmt.Sprintf("call %d: its stream ended without its answer", id)
	}
	return got, ""
}
