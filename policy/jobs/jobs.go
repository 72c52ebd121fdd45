// Package jobs keeps the proxy's hook invocations durably on one machine,
// from before their first attempt until they succeed, so that a proxy
// killed between a cancel and its compensating hook's retry finishes the
// job when it starts again, and a job whose retries ran out stays, an
// orphan, for an operator to retry or drop.
//
// A store is a directory. Each process writes its jobs to a file of its own
// (bbolt, locked while the process lives), so that the proxies one desktop
// client starts, one per server, never wait for or corrupt each other. A
// file whose lock is free belongs to a process that has ended: the next
// store opened in the directory (and every running one, from time to time)
// adopts its jobs and removes it.
package jobs

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// States of a job.
const (
	Pending  = "pending"  // to be attempted (again) at NextAt
	Orphaned = "orphaned" // its retries ran out, or shutdown abandoned it
)

// Job is one hook invocation.
type Job struct {
	// ID is the event's idempotency key: the same for every attempt, and
	// for every process that attempts it.
	ID     string `json:"id"`
	Phase  string `json:"phase"`  // on_cancel, on_timeout, on_late_result, on_late_error
	Target string `json:"target"` // the hook, as logs name it
	Tool   string `json:"tool,omitempty"`
	// Captured are the values the policy captured (an upstream job's id).
	Captured map[string]json.RawMessage `json:"captured,omitempty"`
	// HookDigest names the hook the job runs (policy.Hook.Digest): a
	// proxy runs the job only with a hook of its own configuration that
	// has this digest. A job never carries the hook's definition, so that
	// whoever can write a job (a store file, the fleet's queue) cannot make
	// a proxy run a command or call a URL of their choosing.
	HookDigest string `json:"hook_digest,omitempty"`
	// Definition is the hook's definition as earlier versions wrote it
	// into the job: never run; a job that has it and no digest is refused.
	Definition json.RawMessage `json:"hook,omitempty"`
	// Event is the document the hook gets: opaque here.
	Event     json.RawMessage `json:"event"`
	State     string          `json:"state"`
	Attempts  int             `json:"attempts"`
	NextAt    time.Time       `json:"next_at"`
	LastError string          `json:"last_error,omitempty"`
	Created   time.Time       `json:"created"`
}

var bucket = []byte("jobs")

// Store is one process's file of jobs in a store directory.
type Store struct {
	dir    string
	from   []string       // more directories whose dead files are adopted (AdoptFrom)
	report func(Damage)   // nil: damaged files are set aside quietly
	wants  func(Job) bool // which jobs of dead files to adopt; nil: all

	mu   sync.Mutex // guards the fields below, and serialises the own file's transactions
	path string     // the own file
	db   *bolt.DB   // nil once closed
	file *os.File   // db's, to close with its lock when db faulted (bbolt's locks may then be held)
}

// Open opens a store in dir (created, mode 0700, if need be) with a file
// of the process's own, and adopts the jobs of files no process holds. A
// file of the directory that is damaged (cut short by a crash or a full
// disk, or not a store file at all) is set aside (renamed
// NAME.corrupt-TIMESTAMP) and reported to report, if set, never opened:
// no file in the directory can stop the store from opening.
func Open(dir string, report func(Damage)) (*Store, error) {
	return OpenWanting(dir, report, nil)
}

// OpenWanting is Open for a process that adopts only the jobs wants
// accepts (those whose hook its configuration has): the others stay in
// their dead process's file, for a process that can run them, and for
// hooks list to show.
func OpenWanting(dir string, report func(Damage), wants func(Job) bool) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("hook store: %w", err)
	}
	s := &Store{dir: dir, report: report, wants: wants}
	if err := s.openOwn(); err != nil {
		return nil, err
	}
	if _, err := s.Adopt(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// openOwn opens a new own file. s.mu is held, or s is not shared yet.
func (s *Store) openOwn() error {
	b := make([]byte, 8)
	rand.Read(b)
	path := filepath.Join(s.dir, "jobs-"+hex.EncodeToString(b)+".db")
	db, f, err := openFile(path, time.Second, false)
	if err == nil {
		err = guard(func() error {
			return db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists(bucket); return err })
		})
		if err != nil {
			closeFile(db, f, err)
		}
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("hook store %s: %w", path, err)
	}
	s.path, s.db, s.file = path, db, f
	return nil
}

// closeFile closes a bbolt file; after a fault (err is ErrDamaged) bbolt's
// locks may still be held by the transaction it broke, so only the file is
// closed (and with it the file's lock), the rest left to the collector.
func closeFile(db *bolt.DB, f *os.File, err error) {
	if errors.Is(err, ErrDamaged) {
		f.Close()
		return
	}
	guard(db.Close)
}

// openFile opens a bbolt file, waiting up to timeout for its lock; a fault
// while bbolt reads it is ErrDamaged, and the file is then closed.
func openFile(path string, timeout time.Duration, readOnly bool) (*bolt.DB, *os.File, error) {
	var f *os.File
	var db *bolt.DB
	err := guard(func() error {
		var err error
		db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, ReadOnly: readOnly,
			OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
				f, err = os.OpenFile(name, flag, mode)
				return f, err
			}})
		return err
	})
	if errors.Is(err, ErrDamaged) && f != nil {
		f.Close() // and with it bbolt's lock
	}
	return db, f, err
}

// do runs f in a transaction of the own file (a write if write is set). A
// fault while the file is read (it was cut short under the process) sets it
// aside, reported as damaged, and f runs again once in a new own file: the
// jobs of the damaged file are lost, the store goes on.
func (s *Store) do(write bool, f func(*bolt.Tx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for try := 0; ; try++ {
		if s.db == nil {
			return errors.New("hook store: closed")
		}
		db := s.db
		err := guard(func() error {
			if write {
				return db.Update(f)
			}
			return db.View(f)
		})
		if !errors.Is(err, ErrDamaged) || try > 0 {
			return err
		}
		closeFile(db, s.file, err)
		s.db = nil
		setAside(s.path, err, s.report)
		if oerr := s.openOwn(); oerr != nil {
			return errors.Join(err, oerr)
		}
	}
}

// Path returns the store's own file.
func (s *Store) Path() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.path
}

// Put writes j, durably (the file is synced) before it returns.
func (s *Store) Put(j *Job) error { return s.putAll([]Job{*j}) }

// Delete removes the job with the given id, if there is one.
func (s *Store) Delete(id string) error {
	return s.do(true, func(tx *bolt.Tx) error { return tx.Bucket(bucket).Delete([]byte(id)) })
}

// Get returns the job with the given id.
func (s *Store) Get(id string) (Job, bool, error) {
	var j Job
	found := false
	err := s.do(false, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket).Get([]byte(id))
		found = b != nil
		if !found {
			return nil
		}
		return json.Unmarshal(b, &j)
	})
	return j, found, err
}

// List returns the store's jobs, oldest first.
func (s *Store) List() ([]Job, error) {
	var all []Job
	err := s.do(false, func(tx *bolt.Tx) error { return each(tx, func(j Job) { all = append(all, j) }) })
	sortJobs(all)
	return all, err
}

// each calls f with every job of tx's bucket.
func each(tx *bolt.Tx, f func(Job)) error {
	b := tx.Bucket(bucket)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		var j Job
		if err := json.Unmarshal(v, &j); err != nil {
			return fmt.Errorf("job %q: %w", k, err)
		}
		f(j)
		return nil
	})
}

func sortJobs(all []Job) {
	slices.SortFunc(all, func(a, b Job) int { return a.Created.Compare(b.Created) })
}

// AdoptFrom has the store adopt, from now on, the jobs that dead
// processes left in dirs too (a store shared by every server before each
// had its own), and adopts them now. It is called once, before the store
// is shared.
func (s *Store) AdoptFrom(dirs ...string) ([]Job, error) {
	s.from = dirs
	return s.Adopt()
}

// Adopt moves into the store the jobs of every file of the directory (and
// of those AdoptFrom named) that no process holds and that the store wants,
// removes the files it emptied, and returns the jobs it took. A damaged
// file is set aside and reported, its jobs not taken.
func (s *Store) Adopt() ([]Job, error) {
	var adopted []Job
	own := s.Path()
	all := files(s.dir)
	for _, d := range s.from {
		all = append(all, files(d)...)
	}
	for _, path := range all {
		if path == own {
			continue
		}
		jobs, left, err := take(path, s.wants, s.putAll, s.report)
		switch {
		case errors.Is(err, errBusy):
			continue // a live process's, or one being created
		case err != nil:
			return adopted, err
		}
		adopted = append(adopted, jobs...)
		if !left {
			os.Remove(path) // emptied: should removing fail, the next adoption finds nothing in it
		}
	}
	return adopted, nil
}

// errBusy says a file is not to be taken now: a live process holds it, it
// is being created, or it was damaged and has been set aside. errYoung
// and errGone are files no process holds that are not taken either: one
// too new to judge (damaged, or a process's about to lock it), one gone.
var (
	errBusy  = errors.New("hook store file busy")
	errYoung = fmt.Errorf("%w: too new to judge", errBusy)
	errGone  = fmt.Errorf("%w: gone", errBusy)
)

// locked reports whether a process holds path's lock.
func locked(path string) bool {
	db, f, err := openFile(path, time.Nanosecond, true)
	if db != nil {
		closeFile(db, f, err)
	}
	return errors.Is(err, bolterrors.ErrTimeout)
}

// openForeign opens a file of the directory other than the own one,
// checked first (see checkFile); a damaged one is set aside and reported,
// and errBusy returned, as for one a process holds.
func openForeign(path string, report func(Damage)) (*bolt.DB, *os.File, error) {
	if err := checkFile(path); err != nil {
		if st, serr := os.Stat(path); serr != nil {
			return nil, nil, errGone
		} else if time.Since(st.ModTime()) < creating {
			if locked(path) {
				return nil, nil, errBusy // a process creating its file
			}
			return nil, nil, errYoung // perhaps one about to lock it: judged at a later look
		} else if st.Size() == 0 {
			os.Remove(path) // an empty file a process left at its start: nothing in it
			return nil, nil, errBusy
		}
		// Whether a live process holds it: its lock, taken shared and read
		// only, in case bbolt reads it anyway (guarded).
		if db, f, lerr := openFile(path, time.Nanosecond, true); errors.Is(lerr, bolterrors.ErrTimeout) {
			return nil, nil, errBusy
		} else if db != nil {
			closeFile(db, f, lerr)
		}
		setAside(path, err, report)
		return nil, nil, errBusy
	}
	db, f, err := openFile(path, time.Nanosecond, false)
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil, nil, errBusy
	case err != nil:
		setAside(path, err, report)
		return nil, nil, errBusy
	}
	return db, f, nil
}

// creating is how long a file that does not pass the checks is given to
// be a process's new file still being written, before it counts as damaged.
const creating = 10 * time.Second

// take hands the jobs of a file no process holds that wants accepts (nil:
// all) to keep, then removes them from the file, all under the file's
// lock, so that no other adopter takes them too; left says whether jobs
// it did not want stay in the file. It returns errBusy if the file is not
// to be taken now.
func take(path string, wants func(Job) bool, keep func([]Job) error, report func(Damage)) (jobs []Job, left bool, err error) {
	db, f, err := openForeign(path, report)
	if err != nil {
		return nil, false, err
	}
	var kept error // keep's failure is the store's own, not the file's
	err = guard(func() error {
		return db.Update(func(tx *bolt.Tx) error {
			jobs, left = nil, false
			if err := each(tx, func(j Job) {
				if wants == nil || wants(j) {
					jobs = append(jobs, j)
				} else {
					left = true
				}
			}); err != nil {
				return err
			}
			if kept = keep(jobs); kept != nil {
				return kept
			}
			b := tx.Bucket(bucket)
			switch {
			case b == nil:
				return nil
			case !left:
				return tx.DeleteBucket(bucket)
			}
			for _, j := range jobs {
				if err := b.Delete([]byte(j.ID)); err != nil {
					return err
				}
			}
			return nil
		})
	})
	closeFile(db, f, err)
	switch {
	case kept != nil:
		return nil, false, kept
	case err != nil:
		setAside(path, err, report)
		return nil, false, errBusy
	}
	return jobs, left, nil
}

// putAll writes jobs to the store, in one transaction.
func (s *Store) putAll(jobs []Job) error {
	return s.do(true, func(tx *bolt.Tx) error {
		for i := range jobs {
			b, err := json.Marshal(&jobs[i])
			if err != nil {
				return err
			}
			if err := tx.Bucket(bucket).Put([]byte(jobs[i].ID), b); err != nil {
				return err
			}
		}
		return nil
	})
}

// files returns the store files of dir.
func files(dir string) []string {
	paths, _ := filepath.Glob(filepath.Join(dir, "jobs-*.db"))
	return slices.DeleteFunc(paths, func(p string) bool { return strings.HasSuffix(p, ".tmp") })
}

// Close closes the store; its file is removed if it holds no job.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return nil
	}
	empty := true
	guard(func() error {
		return s.db.View(func(tx *bolt.Tx) error { empty = tx.Bucket(bucket).Stats().KeyN == 0; return nil })
	})
	err := guard(s.db.Close)
	s.db = nil
	if empty && err == nil {
		os.Remove(s.path)
	}
	return err
}

// Edit hands every job of the store to f, and writes back what f returns:
// the job (changed or not), or nil to drop it. It returns how many jobs f
// changed or dropped.
func (s *Store) Edit(f func(Job) *Job) (int, error) {
	n := 0
	err := s.do(true, func(tx *bolt.Tx) (err error) { n, err = edit(tx, f); return err })
	return n, err
}

// edit is Edit within tx.
func edit(tx *bolt.Tx, f func(Job) *Job) (int, error) {
	var all []Job
	if err := each(tx, func(j Job) { all = append(all, j) }); err != nil {
		return 0, err
	}
	n := 0
	for _, j := range all {
		out := f(j)
		switch {
		case out == nil:
			n++
			if err := tx.Bucket(bucket).Delete([]byte(j.ID)); err != nil {
				return n, err
			}
		case !same(out, &j):
			n++
			b, err := json.Marshal(out)
			if err != nil {
				return n, err
			}
			if err := tx.Bucket(bucket).Put([]byte(j.ID), b); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func same(a, b *Job) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// Read returns the jobs of the files of dir that no process holds, oldest
// first, and how many files running processes hold (their jobs are theirs
// to show: through their admin listener). Damaged files are set aside and
// reported to report.
func Read(dir string, report func(Damage)) (jobs []Job, held int, err error) {
	held, err = EditDir(dir, func(j Job) *Job { jobs = append(jobs, j); return &j }, report)
	sortJobs(jobs)
	return jobs, held, err
}

// EditDir is Store.Edit over the files of dir that no process holds; it
// returns how many files running processes hold. Damaged files are set
// aside and reported to report.
func EditDir(dir string, f func(Job) *Job, report func(Damage)) (held int, err error) {
	for _, path := range files(dir) {
		db, file, err := openForeign(path, report)
		if errors.Is(err, errBusy) {
			if _, serr := os.Stat(path); serr == nil && !errors.Is(err, errYoung) && !errors.Is(err, errGone) {
				held++ // a live process's (a file set aside is gone from its place)
			}
			continue
		}
		err = guard(func() error {
			return db.Update(func(tx *bolt.Tx) error {
				if tx.Bucket(bucket) == nil {
					return nil
				}
				_, err := edit(tx, f)
				return err
			})
		})
		closeFile(db, file, err)
		if errors.Is(err, ErrDamaged) {
			setAside(path, err, report)
			continue
		}
		if err != nil {
			return held, fmt.Errorf("%s: %w", path, err)
		}
	}
	return held, nil
}
