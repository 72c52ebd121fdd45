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
	// Hook is the hook's definition, Event the document it gets: both
	// opaque here.
	Hook      json.RawMessage `json:"hook"`
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
	dir  string
	path string
	mu   sync.Mutex // guards db's closing
	db   *bolt.DB
}

// Open opens a store in dir (created, mode 0700, if need be) with a file
// of the process's own, and adopts the jobs of files no process holds.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("hook store: %w", err)
	}
	b := make([]byte, 8)
	rand.Read(b)
	path := filepath.Join(dir, "jobs-"+hex.EncodeToString(b)+".db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("hook store %s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists(bucket); return err }); err != nil {
		db.Close()
		return nil, fmt.Errorf("hook store %s: %w", path, err)
	}
	s := &Store{dir: dir, path: path, db: db}
	if _, err := s.Adopt(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Path returns the store's own file.
func (s *Store) Path() string { return s.path }

// Put writes j, durably (the file is synced) before it returns.
func (s *Store) Put(j *Job) error { return s.putAll([]Job{*j}) }

// Delete removes the job with the given id, if there is one.
func (s *Store) Delete(id string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Delete([]byte(id)) })
}

// Get returns the job with the given id.
func (s *Store) Get(id string) (Job, bool, error) {
	var j Job
	found := false
	err := s.db.View(func(tx *bolt.Tx) error {
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
	err := s.db.View(func(tx *bolt.Tx) error { return each(tx, func(j Job) { all = append(all, j) }) })
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

// Adopt moves into the store the jobs of every file of the directory that
// no process holds, removes those files, and returns the jobs it took.
func (s *Store) Adopt() ([]Job, error) {
	var adopted []Job
	for _, path := range files(s.dir) {
		if path == s.path {
			continue
		}
		jobs, err := take(path, s.putAll)
		if errors.Is(err, bolterrors.ErrTimeout) {
			continue // a live process's
		}
		if err != nil {
			return adopted, err
		}
		adopted = append(adopted, jobs...)
		os.Remove(path) // emptied: should removing fail, the next adoption finds nothing in it
	}
	return adopted, nil
}

// take hands the jobs of a file no process holds to keep, then empties
// the file, all under the file's lock, so that no other adopter takes
// them too; or it returns bolt's ErrTimeout if a process holds the file.
func take(path string, keep func([]Job) error) ([]Job, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Nanosecond})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var jobs []Job
	err = db.Update(func(tx *bolt.Tx) error {
		if err := each(tx, func(j Job) { jobs = append(jobs, j) }); err != nil {
			return err
		}
		if err := keep(jobs); err != nil {
			return err
		}
		if tx.Bucket(bucket) == nil {
			return nil
		}
		return tx.DeleteBucket(bucket)
	})
	return jobs, err
}

// putAll writes jobs to the store, in one transaction.
func (s *Store) putAll(jobs []Job) error {
	return s.db.Update(func(tx *bolt.Tx) error {
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
	s.db.View(func(tx *bolt.Tx) error { empty = tx.Bucket(bucket).Stats().KeyN == 0; return nil })
	err := s.db.Close()
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
	err := s.db.Update(func(tx *bolt.Tx) (err error) { n, err = edit(tx, f); return err })
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
// to show: through their admin listener).
func Read(dir string) (jobs []Job, held int, err error) {
	held, err = EditDir(dir, func(j Job) *Job { jobs = append(jobs, j); return &j })
	sortJobs(jobs)
	return jobs, held, err
}

// EditDir is Store.Edit over the files of dir that no process holds; it
// returns how many files running processes hold.
func EditDir(dir string, f func(Job) *Job) (held int, err error) {
	for _, path := range files(dir) {
		db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Nanosecond})
		if errors.Is(err, bolterrors.ErrTimeout) {
			held++
			continue
		}
		if err != nil {
			return held, fmt.Errorf("%s: %w", path, err)
		}
		err = db.Update(func(tx *bolt.Tx) error {
			if tx.Bucket(bucket) == nil {
				return nil
			}
			_, err := edit(tx, f)
			return err
		})
		db.Close()
		if err != nil {
			return held, fmt.Errorf("%s: %w", path, err)
		}
	}
	return held, nil
}
