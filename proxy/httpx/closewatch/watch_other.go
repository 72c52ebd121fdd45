//go:build !linux && !darwin && !freebsd && !netbsd && !openbsd && !dragonfly

package closewatch

import "errors"

// newKernelWatcher reports that this platform has no watcher the sidecar
// uses: watchClose then watches nothing, and a stream the client closed is
// seen at the next write to it.
func newKernelWatcher() (int, [2]int, error) {
	return 0, [2]int{}, errors.New("no kernel watcher for peer hang-ups on this platform")
}

func closeKernelWatcher(int, [2]int) {}
func wakeKernelWatcher([2]int)       {}

func (wr *Watcher) register(uintptr, uint64) bool { return false }
func (wr *Watcher) unregister(uintptr, uint64)    {}
func (wr *Watcher) loop()                         {}
