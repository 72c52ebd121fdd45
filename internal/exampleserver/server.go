// Package exampleserver is the MCP server bundled with mcp-cancel-proxy for
// its demo and its end-to-end tests. It is built on the official go-sdk and
// has tools that honour cancellation and tools that ignore it, the two kinds
// of server the proxy exists for.
package exampleserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// SlowArgs are the arguments of slow_honour and slow_ignore.
type SlowArgs struct {
	Seconds float64 `json:"seconds" jsonschema:"how long the work takes"`
	Steps   int     `json:"steps,omitempty" jsonschema:"how many progress notifications to send (default 5)"`
	JobID   string  `json:"job_id,omitempty" jsonschema:"an upstream job id to report in progress and result"`
}

// KeyArgs name a gate for block and release.
type KeyArgs struct {
	Key string `json:"key"`
}

// JobResult is the structured result of the slow tools.
type JobResult struct {
	JobID  string `json:"jobId,omitempty"`
	Status string `json:"status"`
}

// New returns the example server.
func New() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcp-cancel-proxy-example", Version: "1.0.0"}, nil)
	g := &gates{m: map[string]chan struct{}{}}
	mcp.AddTool(s, &mcp.Tool{Name: "slow_honour", Description: "Works for a while, reporting progress; stops when cancelled."}, slowHonour)
	mcp.AddTool(s, &mcp.Tool{Name: "slow_ignore", Description: "Works for a while, reporting progress; ignores cancellation and answers anyway."}, slowIgnore)
	mcp.AddTool(s, &mcp.Tool{Name: "block", Description: "Reports progress once, then waits, ignoring cancellation, until release is called with the same key; reports progress again and answers."}, g.block)
	mcp.AddTool(s, &mcp.Tool{Name: "release", Description: "Releases a block call."}, g.release)
	mcp.AddTool(s, &mcp.Tool{Name: "ask_sampling", Description: "Asks the client for a sampling completion; the request is cancelled when this call is."}, askSampling)
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "Exits the server process at once with status 3, mid-call."}, crash)
	addTaskFixtures(s)
	return s
}

// The tools the conformance suite's task scenarios call (0.2.0-alpha.12),
// all plain synchronous calls: the server runs no tasks, and a proxy with
// task: host runs them as tasks for a client that asks.

// GreetArgs are greet's arguments.
type GreetArgs struct {
	Name string `json:"name"`
}

// ComputeArgs are slow_compute's arguments.
type ComputeArgs struct {
	Seconds float64 `json:"seconds" jsonschema:"how long the work takes"`
	Label   string  `json:"label,omitempty" jsonschema:"a label the result and the server's log name"`
}

func addTaskFixtures(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "greet", Description: "Answers Hello, {name}! at once."}, greet)
	mcp.AddTool(s, &mcp.Tool{Name: "slow_compute", Description: "Works for the given seconds, then answers; stops when cancelled, and says so on stderr."}, slowCompute)
	mcp.AddTool(s, &mcp.Tool{Name: "failing_job", Description: "Answers with a tool error after about a second."}, failingJob)
	mcp.AddTool(s, &mcp.Tool{Name: "protocol_error_job", Description: "Answers with a JSON-RPC error (a protocol error), not a tool result."}, protocolErrorJob)
	mcp.AddTool(s, &mcp.Tool{Name: "confirm_delete", Description: "Asks the client to confirm (2026-07-28: an input_required result), then answers."}, confirmDelete)
	mcp.AddTool(s, &mcp.Tool{Name: "multi_input", Description: "Asks the client two questions at once (an input_required result), then answers."}, multiInput)
}

// ConfirmArgs are confirm_delete's arguments.
type ConfirmArgs struct {
	Filename string `json:"filename,omitempty"`
}

// confirmAsk is an elicitation of a yes or no.
func confirmAsk(message string) *mcp.ElicitParams {
	return &mcp.ElicitParams{Message: message, RequestedSchema: map[string]any{"type": "object",
		"properties": map[string]any{"confirm": map[string]any{"type": "boolean"}, "name": map[string]any{"type": "string"}}}}
}

// accepted reports whether the client accepted the elicitation key in
// its responses to an input_required result.
func accepted(responses mcp.InputResponseMap, key string) bool {
	r, ok := responses[key].(*mcp.ElicitResult)
	return ok && r != nil && r.Action == "accept"
}

func confirmDelete(_ context.Context, req *mcp.CallToolRequest, a ConfirmArgs) (*mcp.CallToolResult, any, error) {
	if accepted(req.Params.InputResponses, "confirm") {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deleted " + a.Filename}}}, nil, nil
	}
	return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"confirm": confirmAsk("Delete " + a.Filename + "?")}}, nil, nil
}

func multiInput(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	ask := mcp.InputRequestMap{}
	for _, key := range []string{"first", "second"} {
		if !accepted(req.Params.InputResponses, key) {
			ask[key] = confirmAsk("The " + key + " question?")
		}
	}
	if len(ask) == 0 {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "both answered"}}}, nil, nil
	}
	return &mcp.CallToolResult{InputRequests: ask}, nil, nil
}

func greet(_ context.Context, _ *mcp.CallToolRequest, a GreetArgs) (*mcp.CallToolResult, any, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Hello, " + a.Name + "!"}}}, nil, nil
}

func slowCompute(ctx context.Context, _ *mcp.CallToolRequest, a ComputeArgs) (*mcp.CallToolResult, any, error) {
	fmt.Fprintf(os.Stderr, "example server: slow_compute %s: started, %gs\n", a.Label, a.Seconds)
	select {
	case <-ctx.Done():
		fmt.Fprintf(os.Stderr, "example server: slow_compute %s: cancelled\n", a.Label)
		return nil, nil, ctx.Err()
	case <-time.After(time.Duration(a.Seconds * float64(time.Second))):
	}
	text := fmt.Sprintf("computed %s after %gs", a.Label, a.Seconds)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
}

func failingJob(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	select {
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-time.After(time.Second):
	}
	return nil, nil, errors.New("failing_job failed, as it always does")
}

func protocolErrorJob(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
	return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "protocol_error_job: an internal error, as it always has"}
}

func progress(ctx context.Context, req *mcp.CallToolRequest, done, total int, msg, jobID string) {
	tok := req.Params.GetProgressToken()
	if tok == nil {
		return
	}
	p := &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(done), Total: float64(total), Message: msg}
	if jobID != "" {
		p.Meta = mcp.Meta{"jobId": jobID} // where a policy's capture can find it
	}
	// Sent on a context that outlives the call, as a server that ignores
	// cancellation would: the proxy must be the one to drop it.
	req.Session.NotifyProgress(context.WithoutCancel(ctx), p)
}

func steps(a SlowArgs) (int, time.Duration) {
	n := a.Steps
	if n <= 0 {
		n = 5
	}
	return n, time.Duration(a.Seconds * float64(time.Second) / float64(n))
}

func slowHonour(ctx context.Context, req *mcp.CallToolRequest, a SlowArgs) (*mcp.CallToolResult, JobResult, error) {
	n, step := steps(a)
	for i := 1; i <= n; i++ {
		select {
		case <-ctx.Done():
			return nil, JobResult{}, ctx.Err()
		case <-time.After(step):
		}
		progress(ctx, req, i, n, "working on "+a.JobID, a.JobID)
	}
	return nil, JobResult{JobID: a.JobID, Status: "done"}, nil
}

func slowIgnore(ctx context.Context, req *mcp.CallToolRequest, a SlowArgs) (*mcp.CallToolResult, JobResult, error) {
	n, step := steps(a)
	for i := 1; i <= n; i++ {
		time.Sleep(step) // deliberately deaf to ctx: this is the badly behaved tool
		progress(ctx, req, i, n, "working on "+a.JobID, a.JobID)
	}
	return nil, JobResult{JobID: a.JobID, Status: "done"}, nil
}

// gates hold block calls until release.
type gates struct {
	mu      sync.Mutex // guards m and running
	m       map[string]chan struct{}
	running int // block calls in progress
}

func (g *gates) gate(key string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.m[key]
	if !ok {
		c = make(chan struct{})
		g.m[key] = c
	}
	return c
}

// block reports progress, then waits for release; it says on stderr when
// it starts and how many block calls are then in progress (a limit on
// them is checked against that count), and the trace context it got.
func (g *gates) block(ctx context.Context, req *mcp.CallToolRequest, a KeyArgs) (*mcp.CallToolResult, JobResult, error) {
	g.mu.Lock()
	g.running++
	fmt.Fprintf(os.Stderr, "example server: block %s: started, %d in progress%s\n", a.Key, g.running, traceOf(req))
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running--
		g.mu.Unlock()
	}()
	progress(ctx, req, 1, 2, "blocked on "+a.Key, a.Key)
	select { // ignores ctx on purpose, but says that it ended
	case <-g.gate(a.Key):
	case <-ctx.Done():
		fmt.Fprintf(os.Stderr, "example server: block %s: the request was cancelled; waiting on regardless\n", a.Key)
		<-g.gate(a.Key)
	}
	progress(ctx, req, 2, 2, "released "+a.Key, a.Key)
	return nil, JobResult{JobID: a.Key, Status: "released"}, nil
}

func (g *gates) release(ctx context.Context, req *mcp.CallToolRequest, a KeyArgs) (*mcp.CallToolResult, JobResult, error) {
	close(g.gate(a.Key))
	return nil, JobResult{JobID: a.Key, Status: "releasing"}, nil
}

func askSampling(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, JobResult, error) {
	res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10,
		Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hello"}}}})
	if err != nil {
		return nil, JobResult{}, fmt.Errorf("sampling: %w", err)
	}
	return nil, JobResult{Status: "sampled by " + res.Model}, nil
}

func crash(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, JobResult, error) {
	fmt.Fprintln(os.Stderr, "example server: crashing on request")
	os.Exit(3)
	return nil, JobResult{}, nil
}

// Run serves the example server on stdin and stdout until stdin ends.
func Run(ctx context.Context) error {
	return New().Run(ctx, &mcp.StdioTransport{})
}

// ServeHTTP serves the example server over Streamable HTTP at addr, on
// /mcp, until ctx ends: with sessions, or stateless, where a request whose
// stream the client closes is cancelled (2026-07-28).
func ServeHTTP(ctx context.Context, addr string, stateless bool) error {
	s := New()
	opts := &mcp.StreamableHTTPOptions{Stateless: stateless, PropagateRequestCancellation: stateless}
	return serve(ctx, addr, "Streamable HTTP on http://"+addr+"/mcp", mcp.NewStreamableHTTPHandler(
		func(*http.Request) *mcp.Server { return s }, opts))
}

// ServeSSE serves the example server over the 2024-11-05 HTTP+SSE
// transport at addr (the event stream on /sse) until ctx ends.
func ServeSSE(ctx context.Context, addr string) error {
	s := New()
	return serve(ctx, addr, "HTTP+SSE on http://"+addr+"/sse", mcp.NewSSEHandler(
		func(*http.Request) *mcp.Server { return s }, nil))
}

// serve serves h at addr until ctx ends.
func serve(ctx context.Context, addr, what string, h http.Handler) error {
	srv := &http.Server{Addr: addr, Handler: h}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	fmt.Fprintf(os.Stderr, "example server: serving %s\n", what)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// traceOf is the W3C traceparent a request carries in its params._meta,
// as the server's log line says it.
func traceOf(req *mcp.CallToolRequest) string {
	if tp, ok := req.Params.Meta["traceparent"].(string); ok {
		return ", traceparent " + tp
	}
	return ""
}
