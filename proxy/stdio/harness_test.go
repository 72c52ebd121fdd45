package stdio_test

import (
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"runtime/debug"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// harness runs a real Session between a scripted client and a scripted
// server over in-memory pipes.
type harness struct {
	t            testing.TB
	sess         *stdio.Session
	toProxyC     *io.PipeWriter // the client writes here
	fromProxyC   *lineReader    // what the proxy sends the client
	toProxyS     *io.PipeWriter // the server writes here
	fromProxyS   *lineReader    // what the proxy sends the server
	done         chan error
	clientClosed chan struct{}
	clk          *clock.Fake // the transcripts' clock, which their policy runs on
}

type lineReader struct {
	r *framing.Reader
	c io.Closer
}

func newHarness(t testing.TB, opts stdio.Options) *harness {
	t.Helper()
	return newHarnessWith(t, opts, nil)
}

// newHarnessWith lets a test wrap the writer toward the server.
func newHarnessWith(t testing.TB, opts stdio.Options, wrap func(io.WriteCloser) io.WriteCloser) *harness {
	t.Helper()
	if _, isBench := t.(*testing.B); !isBench {
		watchdog(t, 20*time.Second)
	}
	cIn, cInW := io.Pipe()
	cOutR, cOut := io.Pipe()
	sIn, sInW := io.Pipe()
	sOutR, sOut := io.Pipe()
	h := &harness{
		t: t, toProxyC: cInW, toProxyS: sInW,
		fromProxyC:   &lineReader{framing.NewReader(cOutR, 0), cOutR},
		fromProxyS:   &lineReader{framing.NewReader(sOutR, 0), sOutR},
		done:         make(chan error, 1),
		clientClosed: make(chan struct{}),
	}
	opts.OnClientClosed = func() { close(h.clientClosed) }
	h.sess = stdio.NewSession(opts)
	var toServer io.WriteCloser = sOut
	if wrap != nil {
		toServer = wrap(sOut)
	}
	go func() {
		h.done <- h.sess.Run(stdio.Conn{In: cIn, Out: cOut}, stdio.PipeServer(sIn, toServer, upstream.PipeOptions{MaxFrameSize: opts.MaxFrameSize}))
	}()
	t.Cleanup(func() {
		h.toProxyS.Close()
		h.toProxyC.Close()
		cOutR.Close()
		sOutR.Close()
		<-h.done
		<-h.sess.ReaderDone() // the client's reader may log after Run returns
	})
	return h
}

// watchdog dumps every goroutine and fails loudly if a test hangs.
func watchdog(t testing.TB, d time.Duration) {
	tm := time.AfterFunc(d, func() {
		debug.SetTraceback("all")
		panic("test " + t.Name() + " hung")
	})
	t.Cleanup(func() { tm.Stop() })
}

func (h *harness) client(frame string) { h.t.Helper(); write(h.t, h.toProxyC, frame) }
func (h *harness) server(frame string) { h.t.Helper(); write(h.t, h.toProxyS, frame) }

func write(t testing.TB, w io.Writer, frame string) {
	t.Helper()
	if _, err := io.WriteString(w, frame+"\n"); err != nil {
		t.Fatalf("writing %s: %v", frame, err)
	}
}

// clientGets and serverGets read the next frame the proxy sent to that
// peer and compare it with want as JSON values.
func (h *harness) clientGets(want string) { h.t.Helper(); expect(h.t, h.fromProxyC, "client", want) }
func (h *harness) serverGets(want string) { h.t.Helper(); expect(h.t, h.fromProxyS, "server", want) }

func (h *harness) clientGetsExactly(want string) {
	h.t.Helper()
	expectBytes(h.t, h.fromProxyC, "client", want)
}
func (h *harness) serverGetsExactly(want string) {
	h.t.Helper()
	expectBytes(h.t, h.fromProxyS, "server", want)
}

func next(t testing.TB, r *lineReader, who string) []byte {
	t.Helper()
	f, err := r.r.Read(nil)
	if err != nil {
		t.Fatalf("%s: reading from proxy: %v", who, err)
	}
	return f
}

func expect(t testing.TB, r *lineReader, who, want string) {
	t.Helper()
	got := next(t, r, who)
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s got invalid JSON %s: %v", who, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s got\n  %s\nwant\n  %s", who, got, want)
	}
}

func expectBytes(t testing.TB, r *lineReader, who, want string) {
	t.Helper()
	if got := string(next(t, r, who)); got != want {
		t.Fatalf("%s got\n  %s\nwant exactly\n  %s", who, got, want)
	}
}

// sync sends a marker through both directions and waits for it: every frame
// the proxy was going to send either peer before it has then been read, so
// the next expectation sees only what came after.
func (h *harness) sync() {
	h.t.Helper()
	h.client(`{"jsonrpc":"2.0","method":"notifications/marker"}`)
	h.serverGets(`{"jsonrpc":"2.0","method":"notifications/marker"}`)
	h.server(`{"jsonrpc":"2.0","method":"notifications/marker"}`)
	h.clientGets(`{"jsonrpc":"2.0","method":"notifications/marker"}`)
}

// errorCode extracts error.code and id from a response frame.
func errorOf(t testing.TB, frame []byte) (id any, code int, data map[string]any) {
	t.Helper()
	var r struct {
		ID    any `json:"id"`
		Error *struct {
			Code int            `json:"code"`
			Data map[string]any `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(frame, &r); err != nil || r.Error == nil {
		t.Fatalf("want an error response, got %s (%v)", frame, err)
	}
	return r.ID, r.Error.Code, r.Error.Data
}

func (h *harness) wait() error {
	select {
	case err := <-h.done:
		h.done <- err
		return err
	case <-time.After(10 * time.Second):
		h.t.Fatal("Run did not return")
		return errors.New("unreachable")
	}
}
