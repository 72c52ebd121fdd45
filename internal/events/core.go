package events

import (
	"go.uber.org/zap/zapcore"
)

// Core is the zapcore.Core to tee beside a logger's own: it passes the
// entries that carry Mark, at every level and unsampled, to the feed. While
// the feed has neither a file nor a subscriber it is disabled, so a logger
// with it costs nothing more.
func (f *Feed) Core() zapcore.Core {
	if f == nil {
		return zapcore.NewNopCore()
	}
	return &core{feed: f, enc: f.enc}
}

type core struct {
	feed    *Feed
	enc     zapcore.Encoder // with the logger's context fields (With)
	marked  bool            // the context holds the mark
	session string          // the context's session field, if any
}

func (c *core) Enabled(zapcore.Level) bool { return c.feed.active.Load() }

func (c *core) With(fields []zapcore.Field) zapcore.Core {
	enc := c.enc.Clone()
	for i := range fields {
		fields[i].AddTo(enc)
	}
	session := c.session
	if s, ok := sessionOf(fields); ok {
		session = s
	}
	return &core{feed: c.feed, enc: enc, marked: c.marked || marked(fields), session: session}
}

func (c *core) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !c.Enabled(e.Level) {
		return ce
	}
	return ce.AddCore(e, c)
}

func (c *core) Write(e zapcore.Entry, fields []zapcore.Field) error {
	if !c.marked && !marked(fields) {
		return nil
	}
	e.LoggerName = ""
	session := c.session
	if s, ok := sessionOf(fields); ok {
		session = s
	}
	if bounded(fields) {
		write, leftOut := c.feed.bound.admit(session, e.Time)
		if leftOut > 0 {
			c.feed.publishLeftOut(session, leftOut, e.Time)
		}
		if !write {
			c.feed.dropped.Add(1)
			return nil
		}
	}
	line, err := c.enc.EncodeEntry(e, fields)
	if err != nil {
		return err
	}
	c.feed.publish(line)
	line.Free()
	return nil
}

func (c *core) Sync() error { return nil }

// marked reports whether fields hold the event's name.
func marked(fields []zapcore.Field) bool {
	for _, f := range fields {
		if f.Key == Key && f.Type == zapcore.StringType {
			return true
		}
	}
	return false
}

// Subscription is one follower of the feed (the admin listener's /events).
type Subscription struct {
	c    chan []byte
	feed *Feed
}

// Subscribe follows the feed from now on, keeping up to buffer lines the
// follower has not taken yet (beyond, lines are dropped and counted). It
// returns nil once the feed is closed.
func (f *Feed) Subscribe(buffer int) *Subscription {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	s := &Subscription{c: make(chan []byte, buffer), feed: f}
	f.subs[s] = struct{}{}
	f.active.Store(true)
	return s
}

// Lines yields each event as one JSON line, newline included; it is closed
// when the subscription or the feed ends.
func (s *Subscription) Lines() <-chan []byte { return s.c }

// Stop ends the subscription.
func (s *Subscription) Stop() {
	f := s.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.subs[s]; !ok {
		return
	}
	delete(f.subs, s)
	close(s.c)
	f.active.Store(f.file != nil || len(f.subs) > 0)
}
