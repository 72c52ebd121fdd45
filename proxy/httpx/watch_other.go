//go:build !linux && !darwin && !freebsd && !netbsd && !openbsd && !dragonfly

package httpx

import "errors"

// newKernelWatcher reports that this platform has no watcher the sidecar
// uses: watchClose then watches nothing, and a stream the client closed is
// seen at the next write to it.
func newKernelWatcher() (int, error) {
	return 0, errors.New("no kernel watcher for peer hang-ups on this platform")
}

func (wr *watcher) register(uintptr, uint64) bool { return false }
func (wr *watcher) unregister(uintptr, uint64)    {}
func (wr *watcher) loop()                         {}
