package stdio_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
)

const (
	callTool   = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","_meta":{"progressToken":"p1"}}}`
	progress1  = `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p1","progress":1}}`
	progress2  = `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p1","progress":2}}`
	cancel1    = `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"user stopped"}}`
	result1    = `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`
	initialize = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
)

func TestForwardsBytesUnchanged(t *testing.T) {
	h := newHarness(t, stdio.Options{})
	req := `{"jsonrpc":"2.0", "id":"a" ,"method":"future/method","params":{"_meta":{"x.y/z":[1,2.50,"\u00e9"]}}}`
	h.client(req)
	h.serverGetsExactly(req)
	resp := `{"result": {"v" : 1e3}, "id":"a","jsonrpc":"2.0"}`
	h.server(resp)
	h.clientGetsExactly(resp)
	note := `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"hi"}}`
	h.server(note)
	h.clientGetsExactly(note)
}

func TestCancelSuppressesLateResponseAndProgress(t *testing.T) {
	h := newHarness(t, stdio.Options{})
	h.client(callTool)
	h.serverGets(callTool)
	h.server(progress1)
	h.clientGets(progress1)

	h.client(cancel1)
	h.serverGets(cancel1) // forwarded unchanged
	h.server(progress2)   // the server ignores the cancel...
	h.server(result1)     // ...and answers anyway
	h.sync()              // the client saw neither

	st := h.sess.Stats()
	if st.CancelsForwarded != 1 || st.ResponsesSuppressed != 1 || st.ProgressSuppressed != 1 {
		t.Errorf("Stats = %+v, want 1 cancel forwarded, 1 response and 1 progress suppressed", st)
	}
	// The late response has been absorbed, so id 1 is free again and a new
	// request with it passes unrenamed.
	h.client(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	h.serverGets(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
}

func TestInvalidCancelsAreNotForwarded(t *testing.T) {
	tests := []struct {
		name  string
		setup func(h *harness)
		frame string
	}{
		{"unknown id", func(*harness) {}, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}`},
		{"no requestId", func(*harness) {}, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"reason":"x"}}`},
		{"null requestId", func(*harness) {}, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":null}}`},
		{"no params", func(*harness) {}, `{"jsonrpc":"2.0","method":"notifications/cancelled"}`},
		{"string vs number id", func(h *harness) { h.client(callTool); h.serverGets(callTool) },
			`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"1"}}`},
		{"finished request", func(h *harness) {
			h.client(callTool)
			h.serverGets(callTool)
			h.server(result1)
			h.clientGets(result1)
		}, cancel1},
		{"initialize", func(h *harness) {
			h.client(initialize)
			h.serverGets(initialize)
		}, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":0}}`},
		{"request of the other direction", func(h *harness) {
			h.server(`{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{}}`)
			h.clientGets(`{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{}}`)
		}, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`},
		{"cancelled twice", func(h *harness) {
			h.client(callTool)
			h.serverGets(callTool)
			h.client(cancel1)
			h.serverGets(cancel1)
		}, cancel1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, stdio.Options{})
			tt.setup(h)
			h.client(tt.frame)
			h.sync() // the marker is the server's next frame: the cancel was dropped
			if got := h.sess.Stats().CancelsDropped; got != 1 {
				t.Errorf("CancelsDropped = %d, want 1", got)
			}
		})
	}
}

// TestServerCancelsItsOwnRequest covers a sampling request that the server
// cancels: the cancel goes to the client, and the client's late answer never
// reaches the server. The ids overlap with the client's own, as they do with
// real servers.
func TestServerCancelsItsOwnRequest(t *testing.T) {
	h := newHarness(t, stdio.Options{})
	h.client(callTool)
	h.serverGets(callTool)
	sampling := `{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{"messages":[],"maxTokens":5}}`
	h.server(sampling)
	h.clientGets(sampling)
	serverCancel := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"tool cancelled"}}`
	h.server(serverCancel)
	h.clientGets(serverCancel)
	h.client(`{"jsonrpc":"2.0","id":1,"result":{"role":"assistant","content":{"type":"text","text":"late"},"model":"m"}}`)
	h.sync() // suppressed toward the server

	// The client's own request 1 is untouched by all this.
	h.server(result1)
	h.clientGets(result1)
}

func TestReusedIDIsRenamedWhileLateResponsePending(t *testing.T) {
	h := newHarness(t, stdio.Options{})
	h.client(callTool)
	h.serverGets(callTool)
	h.client(cancel1)
	h.serverGets(cancel1)
	h.client(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	h.serverGets(`{"jsonrpc":"2.0","id":"mcp-cancel-proxy-1","method":"tools/list"}`)
	h.client(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	h.serverGets(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"mcp-cancel-proxy-1"}}`)
	h.client(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	h.serverGets(`{"jsonrpc":"2.0","id":"mcp-cancel-proxy-2","method":"tools/list"}`)

	h.server(result1) // the first call's late answer
	h.server(`{"jsonrpc":"2.0","id":"mcp-cancel-proxy-1","result":{}}`)
	h.server(`{"jsonrpc":"2.0","id":"mcp-cancel-proxy-2","result":{"tools":[]}}`)
	h.clientGets(`{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}`)
}

func TestDuplicateInFlightIDIsRefused(t *testing.T) {
	h := newHarness(t, stdio.Options{})
	h.client(callTool)
	h.serverGets(callTool)
	h.client(callTool)
	id, code, _ := errorOf(t, next(t, h.fromProxyC, "client"))
	if id != float64(1) || code != -32600 {
		t.Errorf("duplicate id answer: id %v code %d, want 1 -32600", id, code)
	}
	h.sync()
}

func TestMalformedInput(t *testing.T) {
	h := newHarness(t, stdio.Options{})
	h.client(`{"jsonrpc":"2.0","id":1,"method":`)
	id, code, data := errorOf(t, next(t, h.fromProxyC, "client"))
	if id != nil || code != -32700 || data["proxy"] != "mcp-cancel-proxy" {
		t.Errorf("parse error answer: id %v code %d data %v, want null -32700 proxy", id, code, data)
	}
	for _, bad := range []string{
		`{"jsonrpc":"2.0","id":null,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`,
		`{"jsonrpc":"2.0","id":[1],"method":"ping"}`,
	} {
		h.client(bad)
		id, code, _ := errorOf(t, next(t, h.fromProxyC, "client"))
		if id != nil || code != -32600 {
			t.Errorf("%s answered with id %v code %d, want null -32600", bad, id, code)
		}
	}
	h.server(`this is not json`)
	h.server(`{"jsonrpc":"2.0","id":12345,"result":{}}`) // answers nothing in flight
	h.sync()
	h.client(callTool)
	h.serverGets(callTool)
	h.server(result1)
	h.clientGets(result1)
}

func TestOversizedFrames(t *testing.T) {
	h := newHarness(t, stdio.Options{MaxFrameSize: 1024})
	big := strings.Repeat("x", 4096)
	h.client(`{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"name":"` + big + `"}}`)
	id, code, _ := errorOf(t, next(t, h.fromProxyC, "client"))
	if id != "big" || code != -32600 {
		t.Errorf("oversized request answered with id %v code %d, want \"big\" -32600", id, code)
	}
	h.client(callTool)
	h.serverGets(callTool)
	h.server(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"` + big + `"}]}}`)
	id, code, _ = errorOf(t, next(t, h.fromProxyC, "client"))
	if id != float64(1) || code != -32603 {
		t.Errorf("oversized response became id %v code %d, want 1 -32603", id, code)
	}
	h.sync()
}

func TestBatchWithCancel(t *testing.T) {
	h := newHarness(t, stdio.Options{})
	h.client(`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":"p1"}}},{"jsonrpc":"2.0","id":2,"method":"ping"}]`)
	h.serverGetsExactly(`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":"p1"}}},{"jsonrpc":"2.0","id":2,"method":"ping"}]`)
	// A batch holding a valid cancel and an invalid one: only the valid one passes.
	h.client(`[` + cancel1 + `,{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":42}}]`)
	h.serverGets(`[` + cancel1 + `]`)
	h.server(`[` + result1 + `,{"jsonrpc":"2.0","id":2,"result":{}}]`)
	h.clientGets(`[{"jsonrpc":"2.0","id":2,"result":{}}]`)
	h.server(`[` + progress1 + `]`) // entirely suppressed: nothing is sent
	h.sync()
}

// TestBatchInvalidElement: an element of a batch that is valid JSON but
// no message is answered -32600 Invalid Request (as JSON-RPC answers
// [1]), and the rest of the batch goes on.
func TestBatchInvalidElement(t *testing.T) {
	h := newHarness(t, stdio.Options{})
	h.client(`[{"jsonrpc":"2.0","id":7,"method":"ping"},5]`)
	h.serverGets(`[{"jsonrpc":"2.0","id":7,"method":"ping"}]`)
	id, code, _ := errorOf(t, next(t, h.fromProxyC, "client"))
	if id != nil || code != -32600 {
		t.Errorf("the element 5 answered with id %v code %d, want null -32600", id, code)
	}
	h.sync()
}

func TestTaskAugmentedRequestCompletesOnCreateTaskResult(t *testing.T) {
	h := newHarness(t, stdio.Options{})
	req := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"research","task":{"ttl":60000},"_meta":{"progressToken":"pt"}}}`
	h.client(req)
	h.serverGets(req)
	created := `{"jsonrpc":"2.0","id":3,"result":{"task":{"taskId":"T1","status":"working","createdAt":"x","lastUpdatedAt":"x","ttl":60000}}}`
	h.server(created)
	h.clientGets(created)
	// The request is complete: a cancel for it is dropped, and the task's
	// progress, which outlives the request, still flows.
	h.client(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`)
	prog := `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"pt","progress":5}}`
	h.server(prog)
	h.clientGets(prog)
	cancelTask := `{"jsonrpc":"2.0","id":4,"method":"tasks/cancel","params":{"taskId":"T1"}}`
	h.client(cancelTask)
	h.serverGets(cancelTask)
}

func TestServerExitFailsRequestsInFlight(t *testing.T) {
	h := newHarness(t, stdio.Options{})
	h.client(callTool)
	h.serverGets(callTool)
	h.client(`{"jsonrpc":"2.0","id":"two","method":"tools/list"}`)
	h.serverGets(`{"jsonrpc":"2.0","id":"two","method":"tools/list"}`)
	h.client(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	h.serverGets(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	h.client(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`)
	h.serverGets(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`)
	h.toProxyS.Close() // the server dies

	got := map[any]int{}
	for range 2 {
		id, code, _ := errorOf(t, next(t, h.fromProxyC, "client"))
		got[id] = code
	}
	if want := map[any]int{float64(1): -32000, "two": -32000}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("errors for requests in flight = %v, want %v (the cancelled one gets none)", got, want)
	}
	if err := h.wait(); !errors.Is(err, stdio.ErrServerGone) {
		t.Errorf("Run() = %v, want ErrServerGone", err)
	}
}

func TestClientEOFClosesServerInput(t *testing.T) {
	h := newHarness(t, stdio.Options{})
	h.client(callTool)
	h.serverGets(callTool)
	h.toProxyC.Close()
	<-h.clientClosed
	if _, err := h.fromProxyS.r.Read(nil); err == nil {
		t.Fatal("server input still open after client EOF")
	}
	h.server(result1) // the server may still answer before it exits
	h.clientGets(result1)
	h.toProxyS.Close()
	if err := h.wait(); err != nil {
		t.Errorf("Run() = %v, want nil after a client-initiated shutdown", err)
	}
}

// TestLargeFrameForwardedWhole sends a tool result far larger than every
// internal buffer; it must arrive byte for byte.
func TestLargeFrameForwardedWhole(t *testing.T) {
	h := newHarness(t, stdio.Options{})
	h.client(callTool)
	h.serverGets(callTool)
	big := `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"` + strings.Repeat("é", 6<<20) + `"}]}}`
	go io.WriteString(h.toProxyS, big+"\n") // the pipe blocks until the client reads
	h.clientGetsExactly(big)
}

// TestReusedProgressTokenIsRenamed: a new request reuses the progress token
// of a cancelled request that is still sending progress. The new request's
// token is renamed upstream, so the old progress stays suppressed and the
// new progress reaches the client under the token it chose.
func TestReusedProgressTokenIsRenamed(t *testing.T) {
	h := newHarness(t, stdio.Options{})
	h.client(callTool)
	h.serverGets(callTool)
	h.client(cancel1)
	h.serverGets(cancel1)
	h.client(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow","_meta":{"progressToken":"p1"}}}`)
	h.serverGets(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow","_meta":{"progressToken":"mcp-cancel-proxy-t1"}}}`)
	h.server(progress2) // the cancelled call's late progress, under the old token
	h.server(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"mcp-cancel-proxy-t1","progress":1}}`)
	h.clientGets(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p1","progress":1}}`)
	if got := h.sess.Stats().ProgressSuppressed; got != 1 {
		t.Errorf("ProgressSuppressed = %d, want 1", got)
	}
	// Both the id and the token renamed in one request.
	h.client(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	h.serverGets(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	h.client(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"progressToken":"p1"}}}`)
	h.serverGets(`{"jsonrpc":"2.0","id":"mcp-cancel-proxy-2","method":"tools/call","params":{"_meta":{"progressToken":"mcp-cancel-proxy-t3"}}}`)
}

// TestFrameIsNotHeldBackByWhatFollows: a frame is written to the other peer
// as soon as it is read, whatever follows it in the same read: blank lines,
// white space, or the start of the next frame. (The relay used to flush
// only when its reader's buffer was empty, so a trailing blank line held the
// frame back until more input came.)
func TestFrameIsNotHeldBackByWhatFollows(t *testing.T) {
	for _, tail := range []string{"\n", "\r\n \t\n\n", "\n{\"jsonrpc\":\"2.0\","} {
		t.Run(fmt.Sprintf("%q", tail), func(t *testing.T) {
			h := newHarness(t, stdio.Options{})
			if _, err := io.WriteString(h.toProxyC, callTool+"\n"+tail); err != nil {
				t.Fatal(err)
			}
			h.serverGets(callTool)
			if _, err := io.WriteString(h.toProxyS, result1+"\n"+tail); err != nil {
				t.Fatal(err)
			}
			h.clientGets(result1)
		})
	}
}

// TestProgressEventNamesTheRequest: a forwarded progress notification is
// reported with the id of the request it reports on, as a suppressed one
// is, not with its progress token (issue 8, item 19: demo's id column).
func TestProgressEventNamesTheRequest(t *testing.T) {
	events := make(chan proxy.Event, 16)
	h := newHarness(t, stdio.Options{OnEvent: func(e proxy.Event) {
		if e.Method == "notifications/progress" {
			events <- e
		}
	}})
	h.client(callTool)
	h.serverGets(callTool)
	h.server(progress1)
	h.clientGets(progress1)
	if e := <-events; e.ID.String() != "1" {
		t.Errorf("forwarded progress reported with id %s, want the request's id 1", e.ID)
	}
}

// TestUnportableIDsAreRefused: ids that servers' JSON libraries rewrite
// (2.0, 1e2, integers beyond 2^53, strings that are not UTF-8) are answered
// -32600 at once, with the id as the client wrote it, and never reach the
// server, whose answer could not be matched (issue 8, item 14).
func TestUnportableIDsAreRefused(t *testing.T) {
	h := newHarness(t, stdio.Options{})
	for _, id := range []string{`2.0`, `1e2`, `9007199254740992`, "\"a\xffb\""} {
		h.client(`{"jsonrpc":"2.0","id":` + id + `,"method":"ping"}`)
		got := next(h.t, h.fromProxyC, "client")
		if !strings.HasPrefix(string(got), `{"jsonrpc":"2.0","id":`+id+`,"error":{"code":-32600`) {
			t.Errorf("id %s answered %s, want -32600 with the id as sent", id, got)
		}
	}
	h.sync() // the server got only the marker
}

// TestLogsTellSizesNotContents: a malformed or oversized message is logged
// by its size, never its contents, unless payloads are asked for, and then
// only at debug level (issue 8, item 15).
func TestLogsTellSizesNotContents(t *testing.T) {
	for _, payloads := range []bool{false, true} {
		core, logs := observer.New(zapcore.DebugLevel)
		h := newHarness(t, stdio.Options{Logger: zap.New(core), LogPayloads: payloads, MaxFrameSize: 1024})
		h.client(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"password":"hunter2"}}`) // cut short
		next(t, h.fromProxyC, "client")                                                                         // the parse error
		h.client(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"arguments":{"password":"hunter2","pad":"` + strings.Repeat("x", 2048) + `"}}}`)
		next(t, h.fromProxyC, "client") // the error for the oversized request
		for _, e := range logs.All() {
			leaks := strings.Contains(fmt.Sprint(e.Message, e.Context), "hunter2")
			if leaks && (!payloads || e.Level != zapcore.DebugLevel) {
				t.Errorf("payloads=%v: %s line %q %v shows the message", payloads, e.Level, e.Message, e.Context)
			}
		}
		if n := logs.FilterMessage("the refused message begins").Len(); (n == 2) != payloads {
			t.Errorf("payloads=%v: %d debug lines with the message's start", payloads, n)
		}
	}
}

// TestOnNotifiedTimesTheCancelsWrite: a client's cancel is reported once
// its notification is written whole to a server that reads it, not
// before; the proxy's own answers and other frames are not reported.
func TestOnNotifiedTimesTheCancelsWrite(t *testing.T) {
	notified := make(chan time.Duration, 4)
	h := newHarness(t, stdio.Options{OnNotified: func(d time.Duration) { notified <- d }})
	h.client(callTool)
	h.serverGets(callTool)
	h.client(cancel1) // the server does not read yet: the write waits
	select {
	case d := <-notified:
		t.Fatalf("notified after %v, before the server read the cancel", d)
	default:
	}
	h.serverGets(cancel1)
	if d := <-notified; d < 0 {
		t.Errorf("notified after %v", d)
	}
	h.client(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	h.serverGets(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	select {
	case d := <-notified:
		t.Errorf("a ping reported as a cancel notified after %v", d)
	default:
	}
}
