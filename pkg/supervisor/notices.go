package supervisor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cairnhq/cairn/internal/handover"
	"github.com/cairnhq/cairn/pkg/assets"
)

// The notices of records that fail their checks are bounded per source: the source is the
// supervisor's own runs bucket (one pipeline's, whoever wrote the entries), and the bound is
// NoticeBurst notices in a NoticeWindow. Every such run still gets its own handover note, a
// person's list of what to look at; past the burst, its notice is not sent alone but counted,
// and one summary notice in the window names how many (and the first of them), so that 300
// junk keys written into the bucket give a few notices, not 300 mails, and none of the 300
// goes untold. A summary is keyed by the window and the count, so it notifies once.
//
// A window opens at the first notice after the last one closed. What is counted after the
// window's summary is told by the next window's.

// maxSummaryRuns is how many run ids a summary names (the notes name every one).
const maxSummaryRuns = 20

// noticeBound is the state of the current window; s.mu guards it.
type noticeBound struct {
	start   time.Time // when the window opened; zero: none is open
	sent    int       // notices sent alone in the window
	summary bool      // the window's summary was sent
	held    []string  // the runs noted without a notice of their own, not yet summarised
	since   time.Time // when the first of held was noted
}

// notifyUntrusted tells of the note of a run whose record failed its checks: alone while the
// window has room, else counted for the window's summary (flushNotices).
func (s *Supervisor) notifyUntrusted(ctx context.Context, note handover.Note) {
	if s.cfg.Notify == nil {
		return
	}
	now := s.cfg.Now()
	s.mu.Lock()
	b := &s.notices
	if b.start.IsZero() || now.Sub(b.start) >= s.cfg.NoticeWindow {
		b.start, b.sent, b.summary = now, 0, false
	}
	alone := b.sent < s.cfg.NoticeBurst
	if alone {
		b.sent++
	} else {
		if len(b.held) == 0 {
			b.since = now
		}
		b.held = append(b.held, note.RunID)
	}
	s.mu.Unlock()
	if alone {
		s.cfg.Notify(ctx, "handover", note, 0, 0)
	}
}

// flushNotices sends the window's one summary of the runs noted without a notice of their
// own, once the window has none yet (a window that had one tells the rest in the next).
func (s *Supervisor) flushNotices(ctx context.Context) {
	if s.cfg.Notify == nil {
		return
	}
	now := s.cfg.Now()
	s.mu.Lock()
	b := &s.notices
	if len(b.held) > 0 && !b.start.IsZero() && now.Sub(b.start) >= s.cfg.NoticeWindow {
		b.start, b.sent, b.summary = now, 0, false
	}
	if len(b.held) == 0 || b.summary {
		s.mu.Unlock()
		return
	}
	held, since := b.held, b.since
	b.held, b.summary = nil, true
	s.mu.Unlock()
	s.cfg.Notify(ctx, "handover", s.summaryNote(held, since, now), 0, 0)
	s.log.Error("records that fail their checks, told by one notice", "count", len(held), "first", held[0])
}

// summaryNote is the note of a summary notice: the count, the first runs, where the notes
// are. It is not written to the handover bucket: each run has its own note there.
func (s *Supervisor) summaryNote(held []string, since, now time.Time) handover.Note {
	named := held[:min(len(held), maxSummaryRuns)]
	more := ""
	if len(held) > len(named) {
		more = fmt.Sprintf(" and %d more", len(held)-len(named))
	}
	bucket := s.cfg.Space.Bucket(assets.BucketRuns)
	why := fmt.Sprintf("%d more records of %s failed their checks since %s (more than %d in %s, told by this one notice): %s%s",
		len(held), bucket, since.UTC().Format(time.RFC3339), s.cfg.NoticeBurst, s.cfg.NoticeWindow, strings.Join(named, ", "), more)
	return handover.Note{
		ID:    fmt.Sprintf("%s:handover:records:%d:%d", held[0], since.UnixNano(), len(held)),
		RunID: held[0],
		Error: cut(why, 2048),
		NextAction: fmt.Sprintf("each run has its handover note in %s (nats kv ls %s); inspect their checkpoints (nats kv get %s RUN): none was resumed and nothing was written",
			s.cfg.Space.Bucket(assets.BucketHandovers), s.cfg.Space.Bucket(assets.BucketHandovers), bucket),
		At: now.UTC().Format(time.RFC3339Nano),
	}
}
