package child

import (
	"fmt"
	"os/exec"
)

// A Group is a started command and every process it starts: a process
// group on Unix, a job object on Windows. The stop ladder signals it whole,
// so that a server's helpers never outlive it.
type Group struct {
	cmd  *exec.Cmd
	plat platformGroup
}

// StartGroup starts cmd as the leader of a group of its own.
func StartGroup(cmd *exec.Cmd) (*Group, error) {
	if err := prepareGroup(cmd); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &Group{cmd: cmd}
	if err := g.plat.attach(cmd); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("containing %q: %w", cmd.Path, err)
	}
	return g, nil
}

// Terminate asks the group to end (SIGTERM; CTRL_BREAK on Windows) and
// reports whether any process of it was there to be asked.
func (g *Group) Terminate() bool { return g.plat.terminate(g.cmd) }

// Kill ends every process of the group at once (SIGKILL; the job
// terminated on Windows) and reports whether any was there.
func (g *Group) Kill() bool { return g.plat.kill(g.cmd) }

// Release frees what the group holds once its processes are gone.
func (g *Group) Release() { g.plat.release() }
