// Package child runs a stdio MCP server as a child process in its own
// process group and stops it the way the MCP lifecycle asks
// (https://modelcontextprotocol.io/specification/2025-11-25/basic/lifecycle#stdio):
// close its stdin, wait, SIGTERM, wait, SIGKILL, so that no process of the
// group survives.
package child

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// Defaults for the stop ladder.
const (
	DefaultTermAfter = 5 * time.Second
	DefaultKillAfter = 5 * time.Second
)

// Options configures a child.
type Options struct {
	// TermAfter is how long to wait after closing the child's stdin before
	// sending SIGTERM to its process group. If zero, DefaultTermAfter.
	TermAfter time.Duration
	// KillAfter is how long to wait after SIGTERM before SIGKILL. If zero,
	// DefaultKillAfter.
	KillAfter time.Duration
	// Stderr receives the child's stderr. If nil, os.Stderr.
	Stderr io.Writer
	// Logger logs each step. If nil, nothing is logged.
	Logger *zap.Logger
	// PassEnv names the proxy's own variables (MCP_CANCEL_PROXY_*) that the
	// child gets; it gets none other (see Environ).
	PassEnv []string
	// OnExit, if set, is called once the child has exited (Exited is
	// closed), on the goroutine that reaped it; it must not block.
	OnExit func()
}

// Process is a running child. Its Stdin, Stdout are the pipes to talk to it.
type Process struct {
	Stdin  io.WriteCloser // the child's stdin; closing it is step one of Stop
	Stdout io.ReadCloser  // the child's stdout

	cmd    *exec.Cmd
	group  *Group
	opts   Options
	log    *zap.Logger
	exited chan struct{} // closed when the leader has been reaped
	err    error         // the leader's exit error; read after exited
	once   sync.Once
}

// Start starts argv[0] with arguments argv[1:] in a new process group.
func Start(argv []string, opts Options) (*Process, error) {
	if len(argv) == 0 {
		return nil, errors.New("no server command given")
	}
	opts = opts.withDefaults()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = Environ(opts.PassEnv)
	group, stdin, stdout, err := startWithPipes(cmd, opts.Stderr)
	if err != nil {
		return nil, fmt.Errorf("starting server %q: %w", argv[0], err)
	}
	p := &Process{Stdin: stdin, Stdout: stdout, cmd: cmd, group: group, opts: opts, exited: make(chan struct{}),
		log: opts.Logger.With(zap.Int("pid", cmd.Process.Pid))}
	p.log.Info("server started", events.Mark(events.ServerStarted), zap.Strings("argv", argv))
	go p.wait()
	return p, nil
}

func (o Options) withDefaults() Options {
	if o.TermAfter <= 0 {
		o.TermAfter = DefaultTermAfter
	}
	if o.KillAfter <= 0 {
		o.KillAfter = DefaultKillAfter
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

// startWithPipes starts cmd with pipes of our own for stdin and stdout
// rather than cmd.StdinPipe/StdoutPipe: Wait closes those as soon as the
// leader exits, which would lose output still in the pipe (a crashing
// server's last responses). With these, stdout ends when the last process
// holding it does. Our ends are non-blocking, served by the runtime poller.
func startWithPipes(cmd *exec.Cmd, stderr io.Writer) (g *Group, stdin *os.File, stdout *os.File, err error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, nil, nil, err
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	copyStderr, err := stderrTo(cmd, stderr)
	if err == nil {
		g, err = StartGroup(cmd)
		copyStderr(err == nil)
	}
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, nil, nil, err
	}
	return g, inW, outR, nil
}

// Pid returns the child's process id, which is also its process group id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// wait reaps the leader, then makes sure that none of its group outlives it:
// helpers that the server left behind are terminated, then killed.
func (p *Process) wait() {
	p.err = p.cmd.Wait()
	p.log.Info("server exited", events.Mark(events.ServerExited), zap.String("status", p.status()))
	close(p.exited)
	if p.opts.OnExit != nil {
		p.opts.OnExit()
	}
	if p.group.Terminate() {
		time.AfterFunc(p.opts.KillAfter, func() {
			p.group.Kill()
			p.group.Release()
		})
		return
	}
	p.group.Release()
}

// Exited is closed when the child has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err returns how the child exited; call it after Exited is closed.
func (p *Process) Err() error { return p.err }

func (p *Process) status() string {
	if p.err == nil {
		return "exit status 0"
	}
	return p.err.Error()
}

// Stop runs the stop ladder once and returns when the child has exited:
// close stdin; after TermAfter, SIGTERM the group; after KillAfter, SIGKILL
// the group. Calling it again waits for the same stop.
func (p *Process) Stop() {
	p.once.Do(func() {
		// "the client SHOULD initiate shutdown by first closing the input stream to the child process"
		p.Stdin.Close()
		if p.waitExit(p.opts.TermAfter) {
			return
		}
		// "If the server does not exit within a reasonable time, send SIGTERM"
		p.log.Warn("server still running after stdin closed; sending SIGTERM", events.Mark(events.ServerSignalled), zap.String("signal", "SIGTERM"), zap.Duration("after", p.opts.TermAfter))
		p.group.Terminate()
		if p.waitExit(p.opts.KillAfter) {
			return
		}
		// "If the server does not exit within a reasonable time after SIGTERM, send SIGKILL"
		p.log.Warn("server still running after SIGTERM; sending SIGKILL", events.Mark(events.ServerSignalled), zap.String("signal", "SIGKILL"), zap.Duration("after", p.opts.KillAfter))
		p.group.Kill()
	})
	<-p.exited
}

func (p *Process) waitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
		return false
	}
}

// stderrTo points the child's stderr at w. A file is passed to the child
// as it is. Any other writer gets a pipe that our own goroutine copies from:
// exec.Cmd's copier would tie Wait to every process holding the pipe, the
// server's helpers included. The returned function, called after Start,
// closes the child's end and starts the copy if the child started.
func stderrTo(cmd *exec.Cmd, w io.Writer) (func(started bool), error) {
	if f, ok := w.(*os.File); ok {
		cmd.Stderr = f
		return func(bool) {}, nil
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = pw
	return func(started bool) {
		pw.Close()
		if !started {
			r.Close()
			return
		}
		go func() { // ends when the last holder of the child's stderr exits
			io.Copy(w, r)
			r.Close()
		}()
	}, nil
}
