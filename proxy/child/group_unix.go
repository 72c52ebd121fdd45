//go:build unix

package child

import (
	"os/exec"
	"syscall"
)

// platformGroup is the process group the leader leads; its id is the
// leader's pid.
type platformGroup struct{}

func (platformGroup) attach(*exec.Cmd) error { return nil }

func (platformGroup) terminate(cmd *exec.Cmd) bool {
	return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) == nil
}

func (platformGroup) kill(cmd *exec.Cmd) bool {
	return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) == nil
}

func (platformGroup) release() {}
