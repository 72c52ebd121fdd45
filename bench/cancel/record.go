//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"net"
	"strconv"
	"sync"
	"time"
)

// now is the clock every process of a run shares: Unix nanoseconds (the
// proxy's events feed is stamped with the same clock).
func now() int64 { return time.Now().UnixNano() }

// seen is a message of a call that the client read after it cancelled.
type seen struct {
	read, sent int64 // when the client read it; when the server wrote it
	late       bool  // the server wrote it after it read the cancel
	answer     bool
}

// callRec is what one call went through, on the client's clock.
type callRec struct {
	id                 int64
	notifyAt, cancelAt int64         // a plain notification sent during it; its cancel
	endAt              int64         // its stream ended (Streamable HTTP)
	answered, ended    chan struct{} // closed at its first answer; at its stream's end
	after              []seen
	answeredFirst      bool // answered before the client would cancel
}

// recorder collects a run's calls and the servers' stamps.
type recorder struct {
	mu       sync.Mutex
	calls    map[int64]*callRec
	cancels  map[int64]int64 // id -> when the server read its cancel
	notifies map[int64]int64 // seq -> when the server read the notification
	waiting  map[int64]chan struct{}
}

func newRecorder() *recorder {
	return &recorder{calls: map[int64]*callRec{}, cancels: map[int64]int64{}, notifies: map[int64]int64{},
		waiting: map[int64]chan struct{}{}}
}

func (r *recorder) start(id int64) *callRec {
	c := &callRec{id: id, answered: make(chan struct{}), ended: make(chan struct{})}
	r.mu.Lock()
	r.calls[id] = c
	r.waiting[id] = make(chan struct{})
	r.mu.Unlock()
	return c
}

// serverRead returns a channel closed when the server reads id's cancel.
func (r *recorder) serverRead(id int64) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waiting[id]
}

// got takes a message the client read.
func (r *recorder) got(msg []byte, at int64) {
	var m struct {
		ID     *int64 `json:"id"`
		Method string `json:"method"`
		Params struct {
			Token *int64 `json:"progressToken"`
			Meta  stamp  `json:"_meta"`
		} `json:"params"`
		Result struct {
			Meta stamp `json:"_meta"`
		} `json:"result"`
	}
	if json.Unmarshal(msg, &m) != nil {
		return
	}
	id, st, answer := m.Params.Token, m.Params.Meta, false
	if m.Method == "" {
		id, st, answer = m.ID, m.Result.Meta, true
	}
	if id == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls[*id]
	if c == nil {
		return
	}
	if c.cancelAt != 0 && at >= c.cancelAt {
		c.after = append(c.after, seen{read: at, sent: st.Sent, late: st.Late, answer: answer})
	}
	if answer && !closed(c.answered) {
		close(c.answered)
	}
}

type stamp struct {
	Sent int64 `json:"bench/sent"`
	Late bool  `json:"bench/late"`
}

// streamEnded notes the end of a call's stream.
func (r *recorder) streamEnded(id, at int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.calls[id]; c != nil && c.endAt == 0 {
		c.endAt = at
		close(c.ended)
	}
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// listenStamps reads the server's stamps from the datagram socket at path
// until it is closed.
func (r *recorder) listenStamps(path string) (stop func(), err error) {
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			f := bytes.Fields(buf[:n])
			if len(f) != 3 {
				continue
			}
			id, _ := strconv.ParseInt(string(f[1]), 10, 64)
			t, _ := strconv.ParseInt(string(f[2]), 10, 64)
			r.mu.Lock()
			switch f[0][0] {
			case 'C':
				if _, dup := r.cancels[id]; !dup {
					r.cancels[id] = t
					if w := r.waiting[id]; w != nil {
						close(w)
					}
				}
			case 'N':
				r.notifies[id] = t
			}
			r.mu.Unlock()
		}
	}()
	return func() { conn.Close(); <-done }, nil
}
