package strict

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
)

// HTTP plays l as a Streamable HTTP client of url's session (none: without
// one), each call on a stream of its own, whose every message must be about
// that call, and returns what its calls saw, or the first message a strict
// client would have closed its connection over (ErrStray).
func HTTP(url, session string, l Load) (Tally, error) {
	ids := make(chan int)
	go func() {
		defer close(ids)
		for i := range l.Calls {
			ids <- 100 + i
		}
	}()
	var mu sync.Mutex
	var total Tally
	var first error
	var wg sync.WaitGroup
	for w := range l.Window {
		rng := rand.New(rand.NewPCG(l.Seed, uint64(w)))
		wg.Go(func() {
			for id := range ids {
				got, err := httpCall(url, session, fmt.Sprintf(l.Call, id, id), id, l.mode(rng))
				mu.Lock()
				total.Add(got)
				first = cmpErr(first, err)
				mu.Unlock()
				if err != nil {
					for range ids { // the other calls go on
					}
				}
			}
		})
	}
	wg.Wait()
	return total, first
}

// client is the strict client's HTTP client: enough idle connections kept
// for a window of calls and their cancels, so that thousands of calls do
// not each open a connection.
var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// Request is the POST of one JSON-RPC message, as an MCP client sends it.
func Request(url, session, body string) *http.Request {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	return req
}

// httpCall makes one call, with its id, and reads its answer to the end.
func httpCall(url, session, frame string, id, mode int) (got Tally, err error) {
	got.Calls = 1
	cancelled := false
	cancel := func() {
		cancelled = true
		got.Cancels++
		if r, err := client.Do(Request(url, session, cancelFrame(id))); err == nil {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
	}
	resp, err := post(Request(url, session, frame), mode == cancelAtOnce, cancel)
	if err != nil {
		return got, fmt.Errorf("call %d: %w", id, err)
	}
	answered := false
	for data := range Messages(resp) {
		var m struct {
			ID     *float64
			Method string
			Params struct{ ProgressToken any }
		}
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			return got, stray("call %d: %q", id, data)
		}
		switch {
		case m.Method == "notifications/progress":
			if m.Params.ProgressToken != fmt.Sprintf("t%d", id) || answered {
				return got, stray("call %d: progress under a token the client does not hold: %s", id, data)
			}
			if cancelled {
				got.RacedProgress++
			} else if mode == cancelOnProgress {
				cancel()
			}
		case m.ID != nil && m.Method == "":
			if int(*m.ID) != id || answered {
				return got, stray("call %d: an answer the client cannot place: %s", id, data)
			}
			answered = true
			if cancelled {
				got.Raced++
			}
		}
	}
	if !answered && !cancelled {
		return got, fmt.Errorf("call %d: its stream ended without its answer", id)
	}
	return got, nil
}

// post sends a call; with cancelNow, it cancels it as soon as it may: once
// an event stream's headers come, or, for a call without progress (whose
// answer may come as one JSON body, headers and all, at its end), once it
// is sent.
func post(req *http.Request, cancelNow bool, cancel func()) (*http.Response, error) {
	sent := make(chan struct{})
	if cancelNow && !strings.Contains(bodyOf(req), "progressToken") {
		req = req.WithContext(httptrace.WithClientTrace(req.Context(),
			&httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { close(sent) }}))
	}
	var resp *http.Response
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err = client.Do(req)
	}()
	select {
	case <-sent:
		cancel()
		<-done
	case <-done:
		if err == nil && cancelNow {
			cancel()
		}
	}
	return resp, err
}

// bodyOf returns a request's body, which it keeps.
func bodyOf(req *http.Request) string {
	body, _ := req.GetBody()
	b, _ := io.ReadAll(body)
	return string(b)
}

// Messages returns the messages of a response, an event stream or a
// single JSON body, in order, closed when the response ends.
func Messages(resp *http.Response) <-chan string {
	ch := make(chan string, 16)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if len(body) > 0 {
			ch <- string(body)
		}
		close(ch)
		return ch
	}
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				ch <- d
			}
		}
	}()
	return ch
}
