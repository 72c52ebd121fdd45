//go:build unix

package child_test

import (
	"bufio"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
)

func start(t *testing.T, script string) (*child.Process, *observer.ObservedLogs) {
	t.Helper()
	tm := time.AfterFunc(30*time.Second, func() { panic("test " + t.Name() + " hung") })
	t.Cleanup(func() { tm.Stop() })
	core, logs := observer.New(zapcore.DebugLevel)
	p, err := child.Start([]string{"sh", "-c", script}, child.Options{
		TermAfter: 100 * time.Millisecond, KillAfter: 100 * time.Millisecond,
		Stderr: io.Discard, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p, logs
}

func messages(logs *observer.ObservedLogs) string {
	var m []string
	for _, e := range logs.All() {
		m = append(m, e.Message)
	}
	return strings.Join(m, "; ")
}

func TestStopClosesStdinAndNeedsNoSignal(t *testing.T) {
	p, logs := start(t, "cat >/dev/null")
	p.Stop()
	if got := messages(logs); strings.Contains(got, "SIGTERM") {
		t.Errorf("a server that exits on EOF got a signal: %s", got)
	}
	if p.Err() != nil {
		t.Errorf("Err() = %v, want a clean exit", p.Err())
	}
}

func TestStopEscalatesToKill(t *testing.T) {
	p, logs := start(t, `trap "" TERM; exec sleep 300`) // sleep inherits the ignored TERM
	p.Stop()
	got := messages(logs)
	if !strings.Contains(got, "sending SIGTERM") || !strings.Contains(got, "sending SIGKILL") {
		t.Errorf("logs %q, want SIGTERM then SIGKILL", got)
	}
	var ee *exec.ExitError
	if err := p.Err(); err == nil || !asExit(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("Err() = %v, want killed by SIGKILL", err)
	}
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

// TestOutputOfACrashIsNotLost: what the server wrote just before dying is
// still read; the pipes are not closed under the reader when it exits.
func TestOutputOfACrashIsNotLost(t *testing.T) {
	p, _ := start(t, `echo '{"last":"words"}'; exit 3`)
	out, err := io.ReadAll(p.Stdout)
	if err != nil || string(out) != "{\"last\":\"words\"}\n" {
		t.Errorf("read %q, %v", out, err)
	}
	<-p.Exited()
	if ee, ok := p.Err().(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("Err() = %v, want exit status 3", p.Err())
	}
}

// TestHelpersOfAnExitedServerAreStopped: a helper the server left behind,
// holding its stdout, is terminated with the group so the output ends.
func TestHelpersOfAnExitedServerAreStopped(t *testing.T) {
	p, _ := start(t, `sleep 300 & echo $!; exit 0`)
	r := bufio.NewReader(p.Stdout)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	if _, err := io.ReadAll(r); err != nil { // returns once the helper is gone
		t.Fatal(err)
	}
	<-p.Exited()
	if err := syscall.Kill(pid, 0); err == nil {
		if stat, _ := exec.Command("ps", "-o", "stat=", "-p", strconv.Itoa(pid)).Output(); !strings.HasPrefix(strings.TrimSpace(string(stat)), "Z") && len(stat) > 0 {
			t.Errorf("helper %d still running (%s)", pid, stat)
		}
	}
}

func TestStartFails(t *testing.T) {
	if _, err := child.Start([]string{"/nonexistent/server"}, child.Options{}); err == nil {
		t.Error("Start of a missing command succeeded")
	}
	if _, err := child.Start(nil, child.Options{}); err == nil {
		t.Error("Start with no command succeeded")
	}
}
