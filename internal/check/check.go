// Package check measures how an MCP server handles cancellation, as a
// client sees it: whether a cancelled call still answers or reports
// progress, and for how long; whether a cancel sent right after its request
// is lost; whether cancels of finished, unknown and initialize requests are
// ignored as the specification asks; whether a task's tasks/cancel moves it
// to cancelled. It runs only the tool and arguments its caller names.
//
// The report it returns says, line by line, what the server did, how the
// specification ranks it (a MUST or a SHOULD) and what mcp-cancel-proxy
// does about a failing line.
package check

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// Options are what Run checks and how long it waits.
type Options struct {
	// Tool and Args are the call to cancel: its name and its arguments
	// (a JSON object, or nil for none).
	Tool string
	Args json.RawMessage
	// Runs is how many times the call is made and cancelled (at least 1).
	Runs int
	// CancelAfter is how long after the call the cancel goes.
	CancelAfter time.Duration
	// Watch is how long the checker listens after a cancel for an answer
	// or progress that should not come.
	Watch time.Duration
	// Timeout bounds every wait for an answer the server owes (initialize,
	// tools/list, ping).
	Timeout time.Duration
	// MaxFrame bounds a line from the server (zero: the framing default).
	MaxFrame int
	// Progress, if not nil, is told what is about to run, step by step.
	Progress func(string)
	// OverHTTP says the server is reached over HTTP (--url): whether its
	// handler stopped cannot be seen there (its cancel, or the stream's
	// close, ends what the server can say to this client), so no line
	// claims it did.
	OverHTTP bool
}

// Tool is one tool of the server's tools/list.
type Tool struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// TaskSupport is execution.taskSupport: "", "forbidden", "optional"
	// or "required".
	TaskSupport string `json:"taskSupport,omitempty"`
}

// Server is what the server said of itself in its initialize result.
type Server struct {
	Name     string           `json:"name"`
	Version  string           `json:"version"`
	Protocol framing.Revision `json:"protocolVersion"`
	// Tasks is set when it offers task-augmented tools/call.
	Tasks bool `json:"tasks"`
}

// Run checks the call o names on the server b reaches (a stdio child, or
// a session of an HTTP server: OverConn) and returns the report. It stops
// b before it returns.
func Run(b Lines, o Options) (*Report, error) {
	s, tools, err := connect(b, o)
	if err != nil {
		return nil, err
	}
	defer s.c.stop(b.Stop)
	r := &Report{Server: s.server, Tool: s.o.Tool, Args: s.o.Args, Runs: s.o.Runs, CancelAfter: s.o.CancelAfter, Watch: s.o.Watch}
	tool, ok := find(tools, s.o.Tool)
	if !ok {
		return nil, fmt.Errorf("the server has no tool %q (it has %s)", s.o.Tool, names(tools))
	}
	runs := s.checkCancels(r)
	for _, next := range []func(){func() { s.checkRace(r, runs) }, func() { s.checkStrayCancels(r) }, func() { s.checkTask(r, tool) }} {
		if s.c.closed() {
			break // the lines so far say so; nothing more can be checked
		}
		next()
	}
	return r, nil
}

// List returns the server b reaches and its tools. It stops b before it
// returns.
func List(b Lines, o Options) (Server, []Tool, error) {
	s, tools, err := connect(b, o)
	if err != nil {
		return Server{}, nil, err
	}
	s.c.stop(b.Stop)
	return s.server, tools, nil
}

// connect initializes a session with b and lists its tools; on an error it
// has stopped b.
func connect(b Lines, o Options) (*session, []Tool, error) {
	s, err := open(b, o.withDefaults())
	if err != nil {
		return nil, nil, err
	}
	tools, err := s.tools()
	if err != nil {
		s.c.stop(b.Stop)
		return nil, nil, err
	}
	return s, tools, nil
}

func (o Options) withDefaults() Options {
	o.Runs = max(o.Runs, 1)
	if o.CancelAfter <= 0 {
		o.CancelAfter = time.Second
	}
	if o.Watch <= 0 {
		o.Watch = 5 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	return o
}

func find(tools []Tool, name string) (Tool, bool) {
	for _, t := range tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

func names(tools []Tool) string {
	if len(tools) == 0 {
		return "none"
	}
	var ns []string
	for _, t := range tools {
		ns = append(ns, t.Name)
	}
	return strings.Join(ns, ", ")
}
