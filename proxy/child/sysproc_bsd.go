//go:build unix && !linux

package child

import (
	"os/exec"
	"syscall"
)

// prepareGroup makes the command lead a process group of its own, so that
// signals reach its helpers too. macOS and the BSDs have no Pdeathsig: when
// the proxy is killed outright, the server's stdin closes, which is how
// MCP's stdio servers learn that their client is gone.
func prepareGroup(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return nil
}
