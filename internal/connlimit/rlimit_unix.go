//go:build unix

package connlimit

import "syscall"

// descriptorLimit returns the process's descriptor limit (the soft one,
// which Go raised to the hard one at start), if it can be read.
func descriptorLimit() (int, bool) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == 0 || r.Cur > 1<<30 {
		return 0, false
	}
	return int(r.Cur), true
}
