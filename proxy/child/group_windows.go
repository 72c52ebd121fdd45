package child

import (
	"cmp"
	"os"
	"os/exec"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

// prepareGroup starts the command in a console process group of its own,
// which CTRL_BREAK can address; a batch file (npx.cmd) through cmd.exe,
// with its arguments quoted as cmd.exe needs (batchCommandLine).
func prepareGroup(cmd *exec.Cmd) error {
	attr := &syscall.SysProcAttr{CreationFlags: windows.CREATE_NEW_PROCESS_GROUP}
	if cmd.Err == nil && len(cmd.Args) > 0 {
		comspec := cmp.Or(os.Getenv("ComSpec"), `C:\Windows\System32\cmd.exe`)
		line, batch, err := batchCommandLine(comspec, cmd.Path, cmd.Args[1:])
		if err != nil {
			return err
		}
		if batch {
			attr.CmdLine, cmd.Path = line, comspec
		}
	}
	cmd.SysProcAttr = attr
	return nil
}

// platformGroup is a job object that holds the leader and everything it
// starts, and kills them all when its last handle closes: nothing survives
// even a crash of the proxy. (A process the leader starts before it is
// assigned to the job escapes it; the window is the few instructions
// between CreateProcess and the assignment.)
type platformGroup struct{ job windows.Handle }

func (g *platformGroup) attach(cmd *exec.Cmd) error {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return err
	}
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{BasicLimitInformation: windows.JOBOBJECT_BASIC_LIMIT_INFORMATION{
		LimitFlags: windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE}}
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		windows.CloseHandle(job)
		return err
	}
	proc, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(cmd.Process.Pid))
	if err != nil {
		windows.CloseHandle(job)
		return err
	}
	defer windows.CloseHandle(proc)
	if err := windows.AssignProcessToJobObject(job, proc); err != nil {
		windows.CloseHandle(job)
		return err
	}
	g.job = job
	return nil
}

// terminate sends CTRL_BREAK to the group: Node, Python and Go servers
// take it as an interrupt.
func (g *platformGroup) terminate(cmd *exec.Cmd) bool {
	return windows.GenerateConsoleCtrlEvent(windows.CTRL_BREAK_EVENT, uint32(cmd.Process.Pid)) == nil
}

func (g *platformGroup) kill(*exec.Cmd) bool {
	return g.job != 0 && windows.TerminateJobObject(g.job, 1) == nil
}

func (g *platformGroup) release() {
	if g.job != 0 {
		windows.CloseHandle(g.job)
		g.job = 0
	}
}
