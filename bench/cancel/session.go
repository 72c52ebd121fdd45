//go:build linux

package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// session is one front, its server and one client session through it.
type session struct {
	front  front
	modern bool
	rec    *recorder
	run    *running
	server *exec.Cmd // an HTTP server, else nil
	cl     client
	unlist func()
	events *feed
	long   time.Duration // the hold of the calls not answered before their cancel
}

// open starts the server, the front and its client.
func (e *env) open(tr transport, f front, i int) (s *session, err error) {
	s = &session{front: f, modern: f.client == "modern", rec: newRecorder(), long: e.long}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	e.stamps = filepath.Join(e.dir, fmt.Sprintf("%s-%d.sock", tr.name, i))
	e.events = filepath.Join(e.dir, fmt.Sprintf("%s-%d.events", tr.name, i))
	if s.unlist, err = s.rec.listenStamps(e.stamps); err != nil {
		return s, err
	}
	if tr.server == "http" {
		if s.server, err = e.startServer(tr.path); err != nil {
			return s, err
		}
	}
	if s.run, err = f.start(e); err != nil {
		return s, err
	}
	if s.run.events != "" {
		s.events = &feed{path: s.run.events}
	}
	var cl client
	switch f.client {
	case "stdio":
		cl, err = newStdioClient(s.run.stdin, s.run.stdout, s.rec)
	case "http":
		cl, err = newHTTPClient(s.run.url, s.rec)
	case "modern":
		cl, err = newModernClient(s.run.url, s.rec)
	case "legacy":
		cl, err = newLegacyClient(s.run.url, s.rec)
	}
	if err == nil {
		s.cl = cl
	}
	return s, err
}

func (s *session) stop() {
	if s.cl != nil {
		s.cl.close()
	}
	if s.run != nil {
		s.run.stop()
	}
	if s.server != nil {
		stopProcess(s.server)
	}
	if s.unlist != nil {
		s.unlist()
	}
}

// measure makes calls from conc workers, ids from lo on, until o.n calls
// (or o.silence cancels) are made or o.maxTime has passed, then waits for
// their streams to end and tallies them.
func (s *session) measure(conc int, o options, lo int64) tally {
	var ids atomic.Int64
	ids.Store(lo)
	var cancels atomic.Int64
	var deadline time.Time
	if o.maxTime > 0 {
		deadline = time.Now().Add(o.maxTime)
	}
	more := func() (int64, bool) {
		if !deadline.IsZero() && time.Now().After(deadline) {
			return 0, false
		}
		if o.silence > 0 {
			return ids.Add(1) - 1, cancels.Load() < int64(o.silence)
		}
		id := ids.Add(1) - 1
		return id, id < lo+int64(o.n)
	}
	var errs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for w := range conc {
		rng := rand.New(rand.NewPCG(uint64(lo), uint64(w)))
		wg.Go(func() {
			for id, ok := more(); ok; id, ok = more() {
				cancelled, err := s.one(id, rng)
				if err != nil {
					if errs.Add(1) == 1 {
						firstErr.Store(err)
					}
					continue
				}
				if cancelled {
					cancels.Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	s.settle(lo, ids.Load())
	t := s.tally(lo, ids.Load())
	t.took, t.errors = took, int(errs.Load())
	if err, ok := firstErr.Load().(error); ok {
		fmt.Fprintf(os.Stderr, "cancel: %s: first of %d errors: %v\n", s.front.name, t.errors, err)
	}
	return t
}

// one makes call id: its request; a pause; a plain notification; a
// pause; its cancel, unless it was answered first; then it waits for the
// server to read the cancel or for the answer (a race the answer won), at
// most a second past the long hold. It reports whether it cancelled.
func (s *session) one(id int64, rng *rand.Rand) (bool, error) {
	c := s.rec.start(id)
	hold := float64(s.long) / float64(time.Millisecond) // answered only when cancelled, or after long
	if rng.IntN(2) == 0 {
		hold = rng.Float64() // ms
	}
	if err := s.cl.call(id, callBody(id, hold, s.modern)); err != nil {
		return false, err
	}
	if answered(c, rng) {
		return false, nil
	}
	at := now()
	if err := s.cl.notify(notifyBody(id)); err == nil {
		s.rec.mu.Lock()
		c.notifyAt = at
		s.rec.mu.Unlock()
	} else if err != errNoNotify {
		return false, err
	}
	if answered(c, rng) {
		return false, nil
	}
	s.rec.mu.Lock()
	c.cancelAt = now()
	s.rec.mu.Unlock()
	if err := s.cl.cancel(id, cancelBody(id)); err != nil {
		return true, err
	}
	select {
	case <-s.rec.serverRead(id):
	case <-c.answered:
	case <-time.After(s.long + time.Second):
	}
	return true, nil
}

// answered pauses up to a random millisecond, and reports whether the
// call was answered by then.
func answered(c *callRec, rng *rand.Rand) bool {
	t := time.NewTimer(time.Duration(rng.Int64N(int64(time.Millisecond))))
	defer t.Stop()
	select {
	case <-c.answered:
		c.answeredFirst = true
		return true
	case <-t.C:
		return false
	}
}

// settle waits, at most 3 s, for the cancelled calls' streams to end where
// the client has one, then 100 ms more for stray messages.
func (s *session) settle(lo, hi int64) {
	if s.front.client == "http" || s.front.client == "modern" {
		limit := time.After(3 * time.Second)
		for id := lo; id < hi; id++ {
			s.rec.mu.Lock()
			c := s.rec.calls[id]
			s.rec.mu.Unlock()
			if c == nil || c.cancelAt == 0 {
				continue
			}
			select {
			case <-c.ended:
			case <-limit:
				id = hi
			}
		}
	}
	time.Sleep(100 * time.Millisecond) // strays: late messages still on their way
}

const (
	callHead = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"hold","arguments":{"hold":%.3f},"_meta":{"progressToken":%d%s}}}`
	modern   = `,"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}`
)

func callBody(id int64, hold float64, isModern bool) []byte {
	m := ""
	if isModern {
		m = modern
	}
	return fmt.Appendf(nil, callHead, id, hold, id, m)
}

func cancelBody(id int64) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"bench"}}`, id)
}

// notifyBody is a plain notification of the cancel's size.
func notifyBody(id int64) []byte {
	b := fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/bench","params":{"seq":%d,"x":""}}`, id)
	pad := len(cancelBody(id)) - len(b)
	out := append(b[:len(b)-3:len(b)-3], strings.Repeat("x", pad)...)
	return append(out, `"}}`...)
}
