package jobs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime/debug"
	"time"
)

// ErrDamaged is the error of a store file that cannot be read safely: too
// short for what its meta pages say it holds (a crash or a full disk cut
// it), meta pages that fail their checksums, not a store file at all, or a
// fault while its memory map was read.
var ErrDamaged = errors.New("the hook store file is damaged")

// Damage says that a store file was damaged and set aside.
type Damage struct {
	File  string // the file as it was named
	Aside string // where it was moved: File.corrupt-TIMESTAMP ("" if it could not be moved)
	Err   error
}

// bbolt's file format (go.etcd.io/bbolt internal/common): two meta pages at
// the start, each a 16-byte page header and then the meta.
const (
	boltMagic   = 0xED0CDAED
	boltVersion = 2
	pageHeader  = 16
	metaSum     = 56 // the meta's bytes before its checksum
)

// checkFile reports whether the store file at path can be opened without
// reading past its end: at least one of its meta pages passes bbolt's
// checks (magic, version, checksum) and the file holds every page the
// newest valid one counts. bbolt maps the file into memory and would
// otherwise fault (SIGBUS, which kills a Go process) reading a page a
// truncated file no longer has.
func checkFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	var best *boltMeta
	head := make([]byte, pageHeader+metaSum+8)
	for _, at := range []int64{0, -1} {
		if at < 0 { // the second meta page follows the first, at its page size
			if best == nil {
				break
			}
			at = int64(best.pageSize)
		}
		if _, err := f.ReadAt(head, at); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if m, ok := readMeta(head); ok && (best == nil || m.txid > best.txid) {
			best = &m
		}
	}
	switch {
	case best == nil:
		return fmt.Errorf("%w: no valid meta page", ErrDamaged)
	case st.Size() < int64(best.pages)*int64(best.pageSize):
		return fmt.Errorf("%w: %d bytes, but its meta page counts %d pages of %d bytes", ErrDamaged, st.Size(), best.pages, best.pageSize)
	}
	return nil
}

type boltMeta struct {
	pageSize uint32
	pages    uint64 // the high water mark
	txid     uint64
}

// readMeta decodes the meta of page b and checks it as bbolt does.
func readMeta(b []byte) (boltMeta, bool) {
	m := b[pageHeader:]
	le := binary.LittleEndian // every platform the proxy is built for
	h := fnv.New64a()
	h.Write(m[:metaSum])
	ps := le.Uint32(m[8:])
	ok := le.Uint32(m[0:]) == boltMagic && le.Uint32(m[4:]) == boltVersion && le.Uint64(m[metaSum:]) == h.Sum64() &&
		ps >= 512 && ps <= 1<<16 && ps&(ps-1) == 0
	return boltMeta{pageSize: ps, pages: le.Uint64(m[40:]), txid: le.Uint64(m[48:])}, ok
}

// guard runs f, turning a fault while it reads a store file's memory map
// (the file cut short under a running proxy, a bad disk) into ErrDamaged
// rather than a crash of the whole process.
func guard(f func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrDamaged, r)
		}
	}()
	return f()
}

// setAside moves a damaged file out of the store's way (its name no longer
// matches a store file's) and reports it.
func setAside(path string, cause error, report func(Damage)) {
	d := Damage{File: path, Aside: path + ".corrupt-" + time.Now().UTC().Format("20060102T150405.000Z"), Err: cause}
	if err := os.Rename(path, d.Aside); err != nil {
		d.Aside = ""
	}
	if report != nil {
		report(d)
	}
}
