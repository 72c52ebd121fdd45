//go:build linux && !portable

package wire

import (
	"io"
	"syscall"
	"unsafe"
)

// maxIovecs is Linux's IOV_MAX.
const maxIovecs = 1024

// hasWritev tells tests which write path the build has.
const hasWritev = true

// vectors is writev's iovec array, made once per Outbox.
type vectors struct{ iov []syscall.Iovec }

// nonBlocking returns w's raw connection if w is a file in non-blocking mode.
func nonBlocking(w io.Writer) syscall.RawConn {
	sc, ok := w.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var flags uintptr
	var errno syscall.Errno
	if err := raw.Control(func(fd uintptr) {
		flags, _, errno = syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
	}); err != nil || errno != 0 || flags&syscall.O_NONBLOCK == 0 {
		return nil
	}
	return raw
}

// writev writes the batch's frames with as few writev calls as it can,
// freeing each frame once written and skipping withdrawn ones. When wait is
// false it stops at the first EAGAIN; otherwise it lets the runtime's poller
// wait until the peer can take more. It returns the frames not fully
// written, the first of them possibly in part.
func (o *Outbox) writev(batch []*Buf, wait bool) ([]*Buf, error) {
	if o.vec.iov == nil {
		o.vec.iov = make([]syscall.Iovec, maxIovecs)
	}
	iov := o.vec.iov // only the one holding busy writes, so one array serves
	var werr error
	i := 0
	err := o.raw.Write(func(fd uintptr) bool {
		for i < len(batch) {
			n, frames := 0, batch[i:]
			for _, b := range frames {
				if n == len(iov) {
					break
				}
				if claim(b) {
					iov[n] = syscall.Iovec{Base: &b.B[b.sent]}
					iov[n].SetLen(len(b.B) - b.sent)
				} else {
					iov[n] = syscall.Iovec{} // withdrawn: an empty slot keeps the indexes aligned
				}
				n++
			}
			written, _, errno := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(n))
			if errno == syscall.EINTR {
				continue
			}
			if errno == 0 {
				i = advance(batch[:i+n], i, int(written))
				continue
			}
			if errno == syscall.EAGAIN {
				unclaimUnsent(frames[:n])
				return !wait
			}
			werr = errno
			return true
		}
		return true
	})
	if werr == nil {
		werr = err
	}
	return batch[i:], werr
}

// unclaimUnsent hands back the frames a write was offered and took none
// of: nothing of them reached the peer, so a cancel may still withdraw
// them, whenever the write is tried again (each is claimed anew then).
// Before, such a frame counted as being written until the peer took it,
// and its request's cancel went after it in place of withdrawing both.
func unclaimUnsent(offered []*Buf) {
	for _, b := range offered {
		if v := b.st.Load(); v&stateMask == bufWriting && b.sent == 0 {
			b.st.CompareAndSwap(v, v&^stateMask|bufQueued)
		}
	}
}

// advance credits n written bytes to the frames from batch[i] on, all of
// which were offered to the write, frees those completed (and withdrawn ones
// passed over), and returns the index of the first frame not complete.
func advance(batch []*Buf, i, n int) int {
	for ; i < len(batch); i++ {
		b := batch[i]
		if b.st.Load()&stateMask != bufWriting { // withdrawn: nothing of it was sent
			PutBuf(b)
			batch[i] = nil
			continue
		}
		left := len(b.B) - b.sent
		if n < left {
			b.sent += n
			return i
		}
		n -= left
		written(b)
		batch[i] = nil
	}
	return i
}
