package policy

import (
	"container/list"
	"sync"
)

// Defaults of Options.ReissueMemory and ReissueAnswers.
const (
	DefaultReissueMemory  = 64 << 20
	DefaultReissueAnswers = 4096
)

// keptAnswers bounds the suppressed answers that reissue: join keeps for
// re-issues (each for reissue_window), across the process: in bytes and in
// entries, the oldest dropped first. 200 cancelled 8 MiB answers held
// 2.1 GB before, long after their sessions had ended.
type keptAnswers struct {
	maxBytes   int64
	maxEntries int
	metrics    Metrics

	mu    sync.Mutex // guards the fields below; taken after a joins table's, never before
	bytes int64
	order list.List // of *shared, oldest first
}

// add counts s's answer, kept from now on, and returns what must be
// dropped (oldest first, s itself if it alone is over the bound), already
// uncounted: the caller's to unshare, each under its own table's lock.
func (k *keptAnswers) add(s *shared) (drop []*shared) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s.kept = k.order.PushBack(s)
	k.bytes += int64(len(s.answer))
	for k.bytes > k.maxBytes || k.order.Len() > k.maxEntries {
		oldest := k.order.Front().Value.(*shared)
		k.removeLocked(oldest)
		drop = append(drop, oldest)
	}
	k.metrics.AnswersKept(k.bytes, k.order.Len())
	return drop
}

// remove uncounts s, if it is counted.
func (k *keptAnswers) remove(s *shared) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s.kept != nil {
		k.removeLocked(s)
		k.metrics.AnswersKept(k.bytes, k.order.Len())
	}
}

func (k *keptAnswers) removeLocked(s *shared) {
	k.order.Remove(s.kept)
	s.kept = nil
	k.bytes -= int64(len(s.answer))
}

// dropKept forgets s, a kept answer the bound dropped, if it is still
// kept in j: a re-issue of its call runs anew.
func (j *joins) dropKept(s *shared, k *keptAnswers) func() {
	return func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.byKey[s.key] == s && s.answer != nil {
			j.unshareLocked(s)
			k.metrics.AnswerDropped()
		}
	}
}
