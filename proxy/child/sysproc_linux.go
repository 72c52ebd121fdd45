package child

import (
	"os/exec"
	"syscall"
)

// prepareGroup makes the command lead a process group of its own, so that
// signals reach its helpers too, and die with the proxy (Pdeathsig), so that
// a server never lingers without its client when the proxy is killed.
func prepareGroup(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return nil
}
