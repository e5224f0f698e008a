package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
)

// rejectedRow is one refusal as cairn rejected prints it, and with --json one object per line.
type rejectedRow struct {
	At      time.Time `json:"at"`
	RunID   string    `json:"run_id"`  // the run the refused input was about; "none" when it named none
	Subject string    `json:"subject"` // where the refused message was sent
	Reason  string    `json:"reason"`
	Stream  string    `json:"stream,omitempty"` // where it was stored, when it was
	Seq     uint64    `json:"seq,omitempty"`
}

// cmdRejected lists the refusals of the night's space, or of a registered pipeline's: the
// starts and commands its supervisor refused, the messages its services could not take.
func cmdRejected(ctx context.Context, args []string) error {
	return runRejected(ctx, os.Stdout, args)
}

// runRejected is cairn rejected, printing to out.
func runRejected(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("rejected", flag.ContinueOnError)
	only := fs.String("pipeline", "", "the refusals of this registered pipeline (default: the reference night's)")
	run := fs.String("run", "", "only the refusals about run RUN")
	last := fs.Int("last", 50, "read the last N refusals (0: every one kept)")
	raw := fs.Bool("json", false, "print one JSON object per refusal and line")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *last < 0 {
		return fmt.Errorf("%w: rejected [--pipeline NAME] [--run RUN] [--last N] [--json]", errUsage)
	}
	_, nc, js, err := connect("cli")
	if err != nil {
		return err
	}
	defer nc.Close()
	p, err := openOne(ctx, js, *only)
	if err != nil {
		return err
	}
	sp := p.space
	rows, err := readRejected(ctx, js, sp, *last)
	if err != nil {
		return err
	}
	if *run != "" {
		kept := rows[:0]
		for _, r := range rows {
			if r.RunID == *run {
				kept = append(kept, r)
			}
		}
		rows = kept
	}
	if *raw {
		enc := json.NewEncoder(out)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	if len(rows) == 0 {
		fmt.Fprintf(out, "no refusals on %s\n", sp.Rejected())
		return nil
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tRUN\tSUBJECT\tREASON")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.At.UTC().Format(time.RFC3339), r.RunID, r.Subject, oneLine(r.Reason))
	}
	return tw.Flush()
}

// readRejected reads the last n refusals (every one when n is 0) on space sp's rejected
// stream, oldest first, through an ordered consumer that the server removes after the read.
func readRejected(ctx context.Context, js jetstream.JetStream, sp assets.Space, n int) ([]rejectedRow, error) {
	name := sp.Stream(assets.StreamRejected)
	st, err := js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("the refusals' stream %s: %w", name, err)
	}
	state := st.CachedInfo().State
	if state.Msgs == 0 {
		return nil, nil
	}
	from := state.FirstSeq
	if n > 0 && state.LastSeq >= uint64(n) {
		from = max(from, state.LastSeq-uint64(n)+1)
	}
	cons, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{FilterSubjects: []string{sp.Rejected()},
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from, InactiveThreshold: 15 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	var rows []rejectedRow
	add := func(m jetstream.Msg) uint64 {
		if row, ok := rejectedOf(m); ok {
			rows = append(rows, row)
		}
		meta, err := m.Metadata()
		if err != nil {
			return 0
		}
		return meta.Sequence.Stream
	}
	for seen := from - 1; seen < state.LastSeq; {
		// What is there now, at once; when nothing is yet, wait a little for the next.
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			seen = max(seen, add(m))
		}
		if got > 0 {
			continue
		}
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
			return rows, nil // the rest went (limits) since the read began
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s after sequence %d: %w", name, seen, err)
		}
		seen = max(seen, add(m))
	}
	return rows, nil
}

// rejectedOf is the row of a refusal; ok false for a message that is none.
func rejectedOf(m jetstream.Msg) (rejectedRow, bool) {
	e, err := events.Decode(&nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
	if err != nil || e.Type != events.TypeRejected {
		return rejectedRow{}, false
	}
	var r events.Rejected
	if e.Unmarshal(&r) != nil {
		return rejectedRow{}, false
	}
	return rejectedRow{At: e.Time, RunID: e.Subject, Subject: r.Subject, Reason: r.Reason, Stream: r.Stream, Seq: r.Seq}, true
}

// oneLine keeps a reason on its row of the table.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
