package policy

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/envexpand"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/keepalive"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/netproxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
)

// Hook defaults.
const (
	DefaultHookTimeout = 10 * time.Second
	DefaultHookBackoff = time.Second
	hookOutputMax      = 4 << 10 // bytes of a hook's output kept for the log and the audit
)

// HookResult is how one hook ended, after its retries.
type HookResult struct {
	Phase    string        `json:"phase"` // on_cancel, on_timeout, on_late_result, on_late_error
	Target   string        `json:"target"`
	Attempts int           `json:"attempts"`
	OK       bool          `json:"ok"`
	Error    string        `json:"error,omitempty"`
	Output   string        `json:"output,omitempty"` // the last attempt's output (exec) or body (http), cut at 4 KiB
	Duration time.Duration `json:"-"`
	Took     string        `json:"took"`
	// Pending says that the hook had not succeeded when the proxy stopped,
	// and stays in the hook store, to be resumed when it starts again.
	Pending bool `json:"pending,omitempty"`
	// Queued says that the hook went to the fleet's work queue, to be run
	// by whichever replica takes it.
	Queued bool `json:"queued,omitempty"`
}

// runner runs hooks off the forwarding path: at most max at once, the rest
// waiting in turn; each attempt bounded by its timeout, failures retried
// with doubling backoff. With a store, each invocation is a job written
// before its first attempt and kept until it succeeds (see durable.go).
type runner struct {
	sem    chan struct{}
	client *fasthttp.Client
	tls    *fasthttp.Client // https webhooks' when they go through the environment's proxy; else client
	ctx    context.Context  // cancelled when shutdown gives up waiting
	stop   context.CancelFunc
	wg     sync.WaitGroup
	jobs   *durable
	// metrics is told of hooks waiting for a turn (see turn).
	metrics Metrics
	// passEnv names the proxy's own variables an exec hook gets (see
	// child.Environ).
	passEnv []string
}

// dialer is a fasthttp dial function; nil is fasthttp's own.
type dialer = func(addr string) (net.Conn, error)

// turn waits for one of the hooks.max_running turns, counted as waiting
// while none is free; false if the proxy stopped waiting first (shutdown).
// The caller gives the turn back with <-r.sem.
func (r *runner) turn() bool {
	select {
	case r.sem <- struct{}{}:
		return r.ctx.Err() == nil || r.giveBack()
	default:
	}
	r.metrics.HooksWaiting(1)
	defer r.metrics.HooksWaiting(-1)
	select {
	case r.sem <- struct{}{}:
		return r.ctx.Err() == nil || r.giveBack()
	case <-r.ctx.Done():
		return false
	}
}

// giveBack returns a turn taken as the proxy stopped waiting, and reports
// false.
func (r *runner) giveBack() bool {
	<-r.sem
	return false
}

func newRunner(max int, jobs *durable, passEnv []string, maxHeader int, idle time.Duration, dial, dialTLS dialer) *runner {
	ctx, stop := context.WithCancel(context.Background())
	// Answers are streamed so that only their first hookOutputMax bytes are
	// read (a webhook answering 1 GiB cost the proxy 1 GB); the request's
	// timeout bounds the reading too. An idle connection is retired before
	// the webhook's server closes it, and a request that found its
	// connection closed goes again on a new one (keepalive).
	client := func(d dialer) *fasthttp.Client {
		c := &fasthttp.Client{NoDefaultUserAgentHeader: true, StreamResponseBody: true,
			ReadBufferSize: cmp.Or(maxHeader, 64<<10), Dial: keepalive.Dial(d)} // the answer's headers' limit
		keepalive.Install(c, idle)
		return c
	}
	r := &runner{sem: make(chan struct{}, max), ctx: ctx, stop: stop, jobs: jobs, passEnv: passEnv, client: client(dial),
		metrics: noMetrics{}}
	r.tls = r.client
	if dialTLS != nil {
		r.tls = client(dialTLS)
	}
	return r
}

// webhookDialers are the webhooks' dial functions: through the
// environment's proxy (HTTP_PROXY for http webhooks, HTTPS_PROXY for https
// ones) with http.proxy: env, else fasthttp's own (nil).
func webhookDialers(fromEnv bool) (dial, dialTLS dialer, err error) {
	if !fromEnv {
		return nil, nil, nil
	}
	if dial, err = netproxy.FromEnv(false, 10*time.Second); err == nil {
		dialTLS, err = netproxy.FromEnv(true, 10*time.Second)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("http.proxy: env: %w", err)
	}
	return dial, dialTLS, nil
}

// run starts h for an event document in the background, its job written
// to the store (if any) before the first attempt; done gets the result, on
// the hook's goroutine.
func (r *runner) run(phase string, h *Hook, ev *HookEvent, done func(HookResult)) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		j := r.jobs.begin(phase, h, ev) // a synced write: never on the relay's path
		if r.jobs.fleet != nil && r.jobs.forward(j) {
			done(HookResult{Phase: phase, Target: j.Target, Queued: true})
			return
		}
		done(r.attempts(j, h, ev))
	}()
}

// attempts runs h until it succeeds or its retries run out, from the
// attempts j has had (a job resumed after a restart has had some), the
// next at j's NextAt.
func (r *runner) attempts(j *job, h *Hook, ev *HookEvent) HookResult {
	res := HookResult{Phase: j.Phase, Target: h.target(), Attempts: j.Attempts}
	start := time.Now()
	base := cmp.Or(h.Backoff, DefaultHookBackoff)
	wait := time.Until(j.NextAt)
	for res.Attempts <= h.Retries {
		if wait > 0 {
			select {
			case <-time.After(wait):
			case <-r.ctx.Done():
			}
		}
		if r.ctx.Err() != nil {
			res.Error = "abandoned at shutdown: " + cmp.Or(res.Error, "never started")
			break
		}
		if !r.turn() {
			res.Error = "abandoned at shutdown: " + cmp.Or(res.Error, "never started")
			break
		}
		res.Attempts++
		ev.Attempt = res.Attempts
		span := ev.attemptSpan(j.Phase, res.Target)
		out, err := r.once(h, ev)
		<-r.sem
		res.Output = out
		if span != nil {
			span.End(cmp.Or(errText(err), "ran"), err != nil)
		}
		if err == nil {
			res.OK, res.Error = true, ""
			break
		}
		res.Error = err.Error()
		wait = base << (res.Attempts - 1) // doubling
		r.jobs.failed(j, res.Attempts, res.Error, time.Now().Add(wait))
	}
	res.Pending = r.jobs.end(j, res, r.ctx.Err() != nil)
	res.Duration = time.Since(start)
	res.Took = res.Duration.Round(time.Millisecond).String()
	return res
}

// attemptSpan starts the span of a hook's attempt under its request's,
// when traced, and notes its context for the hook.
func (ev *HookEvent) attemptSpan(phase, target string) proxy.Span {
	if ev.span == nil {
		return nil
	}
	span := ev.span.Child("hook "+phase, proxy.String("mcp_cancel_proxy.hook.phase", phase),
		proxy.String("mcp_cancel_proxy.hook.target", target), proxy.Int("mcp_cancel_proxy.hook.attempt", ev.Attempt),
		proxy.String("mcp_cancel_proxy.hook.idempotency_key", ev.IdempotencyKey))
	ev.trace = span.Context()
	return span
}

// errText is err's text, or "" for none.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// once runs one attempt and returns its output.
func (r *runner) once(h *Hook, ev *HookEvent) (string, error) {
	doc, err := ev.marshal()
	if err != nil {
		return "", err
	}
	if h.HTTP != nil {
		return r.post(h, ev, doc)
	}
	return r.exec(h, ev, doc)
}

// exec runs the hook's command in a process group of its own, the event
// on its stdin; at the timeout the whole group is killed.
func (r *runner) exec(h *Hook, ev *HookEvent, doc []byte) (string, error) {
	timeout := cmp.Or(h.Timeout, DefaultHookTimeout)
	ctx, cancel := context.WithTimeout(r.ctx, timeout)
	defer cancel()
	cmd := exec.Command(h.Exec[0], h.Exec[1:]...)
	cmd.Stdin = bytes.NewReader(doc)
	var out limitedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(child.Environ(r.passEnv), ev.env()...)
	cmd.WaitDelay = time.Second // a grandchild holding the output open does not hold the hook
	group, err := child.StartGroup(cmd)
	if err != nil {
		return "", err
	}
	defer group.Release()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			return out.String(), fmt.Errorf("%s: %w", h.Exec[0], err)
		}
		return out.String(), nil
	case <-ctx.Done():
		group.Kill()
		<-waited
		if r.ctx.Err() != nil {
			return out.String(), errors.New("killed at shutdown")
		}
		return out.String(), fmt.Errorf("%s: timed out after %v and was killed", h.Exec[0], timeout)
	}
}

// post sends the event to the hook's URL; any 2xx is success.
func (r *runner) post(h *Hook, ev *HookEvent, doc []byte) (string, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	target, headers, err := h.HTTP.expanded()
	if err != nil { // checked at start: the environment does not change
		return "", err
	}
	req.SetRequestURI(target)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("Idempotency-Key", ev.IdempotencyKey)
	if ev.trace.Parent != "" {
		req.Header.Set("traceparent", ev.trace.Parent)
		if ev.trace.State != "" {
			req.Header.Set("tracestate", ev.trace.State)
		}
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.SetBody(doc)
	timeout := cmp.Or(h.HTTP.Timeout, cmp.Or(h.Timeout, DefaultHookTimeout))
	c := r.client
	if strings.HasPrefix(strings.ToLower(target), "https://") {
		c = r.tls
	}
	if err := c.DoTimeout(req, resp, timeout); err != nil {
		if _, ok := errors.AsType[*fasthttp.ErrSmallBuffer](err); ok {
			return "", fmt.Errorf("POST %s: its answer's headers are larger than limits.max_response_header_bytes allows", h.HTTP.shown())
		}
		return "", fmt.Errorf("POST %s: %w", h.HTTP.shown(), err)
	}
	body := answerOf(resp)
	if code := resp.StatusCode(); code < 200 || code > 299 {
		return body, fmt.Errorf("POST %s: HTTP %d", h.HTTP.shown(), code)
	}
	return body, nil
}

// shutdown waits up to wait for hooks running or waiting; then it kills
// what still runs and lets the rest end as abandoned. It returns once
// every hook has reported.
func (r *runner) shutdown(wait time.Duration) {
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
		r.stop()
		<-done
	}
	r.stop()
}

// target names a hook for logs.
func (h *Hook) target() string {
	if h.HTTP != nil {
		return "POST " + h.HTTP.shown()
	}
	return strings.Join(h.Exec, " ")
}

// answerOf returns the first hookOutputMax bytes of a webhook's answer,
// for the log and the audit, and closes the rest unread (the connection is
// then not reused): whatever its size, an answer costs a few KiB.
func answerOf(resp *fasthttp.Response) string {
	stream := resp.BodyStream()
	if stream == nil {
		return string(resp.Body()[:min(len(resp.Body()), hookOutputMax)])
	}
	defer resp.CloseBodyStream()
	b := make([]byte, hookOutputMax)
	n, _ := io.ReadFull(stream, b) // short, or cut by the timeout: what came is kept
	return string(b[:n])
}

// shown is the webhook's URL as it may be shown (see RedactURL).
func (h *HTTPHook) shown() string { return RedactURL(h.URL, h.RedactPath) }

// expanded returns the hook's URL and headers with the environment
// variables they name taken in (envexpand); an error names which setting
// names an unset one, never a value.
func (h *HTTPHook) expanded() (target string, headers map[string]string, err error) {
	if target, err = envexpand.Expand(h.URL); err != nil {
		return "", nil, fmt.Errorf("url: %w", err)
	}
	headers = make(map[string]string, len(h.Headers))
	for k, v := range h.Headers {
		if headers[k], err = envexpand.Expand(v); err != nil {
			return "", nil, fmt.Errorf("headers.%s: %w", k, err)
		}
		if strings.ContainsAny(headers[k], "\r\n") {
			return "", nil, fmt.Errorf("headers.%s: a value has no line breaks", k)
		}
	}
	return target, headers, nil
}

// limitedBuffer keeps the first hookOutputMax bytes written to it.
type limitedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := hookOutputMax - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
