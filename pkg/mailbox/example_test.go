package mailbox_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/mailbox"
	"github.com/cairnhq/cairn/pkg/runner"
)

// A month's folder of three mails, one of them a file sent twice: frozen, each file read
// once, and checked.
func Example() {
	srv, err := startServer() // an in-process IMAP server on loopback
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.stop()
	err = deliverMay(srv.Addr, "Invoices/2026-05",
		letter("Invoice A-1001", pdf("A-1001")),
		letter("Invoice A-1002", pdf("A-1002")),
		letter("Invoice A-1001, again", pdf("A-1001")))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	cfg := mailbox.Config{Addr: srv.Addr, User: "ap@parts.example", Password: "s3cret"}

	snap, err := mailbox.Freeze(ctx, cfg, "Invoices/2026-05", time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range snap.Messages {
		fmt.Println(m.UID, m.Date.Format(time.DateOnly), m.Attachments[0].Name, m.Attachments[0].Digest[:15])
	}
	r, err := snap.Open(ctx, cfg) // one connection for every read
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range snap.Unique() {
		b, err := r.Read(ctx, d.UIDs[0], d.Name)
		fmt.Printf("%s in %v: %d bytes, %v\n", d.Name, d.UIDs, len(b), err)
	}
	fmt.Println("close:", r.Close())
	changed, err := snap.Check(ctx, cfg)
	fmt.Println("changed:", changed, err)
	// Output:
	// 1 2026-05-04 invoice-A-1001.pdf sha256:7284cb0a
	// 2 2026-05-05 invoice-A-1002.pdf sha256:5d7d5767
	// 3 2026-05-06 invoice-A-1001.pdf sha256:7284cb0a
	// invoice-A-1001.pdf in [1 3]: 26 bytes, <nil>
	// invoice-A-1002.pdf in [2]: 26 bytes, <nil>
	// close: <nil>
	// changed: [] <nil>
}

// A job's first step freezes the mailbox and tells the run its fingerprint; a later step
// reads each file once, and checks the mailbox when it starts after a break.
func Example_job() {
	cfg := mailbox.Config{
		Addr: "imap.parts.example:993", User: "ap@parts.example", Password: "from the environment",
		TLS: &tls.Config{ServerName: "imap.parts.example"},
	}
	type month struct {
		Folder string    `json:"folder"`
		Cutoff time.Time `json:"cutoff"`
	}
	collect := runner.Func(func(ctx context.Context, a *runner.Attempt, in month) (mailbox.Snapshot, error) {
		s, err := mailbox.Freeze(ctx, cfg, in.Folder, in.Cutoff)
		if err != nil {
			return s, err
		}
		a.Fingerprint(s.Fingerprint())
		return s, nil
	})
	extract := runner.Func(func(ctx context.Context, a *runner.Attempt, s mailbox.Snapshot) ([]string, error) {
		r, err := s.Open(ctx, cfg) // one login for the month's files
		if errors.Is(err, mailbox.ErrDrift) {
			return nil, runner.Permanent(err)
		}
		if err != nil {
			return nil, err
		}
		defer r.Close()
		var read []string
		for _, d := range s.Unique() { // a file sent twice is read once
			b, err := r.Read(ctx, d.UIDs[0], d.Name)
			if errors.Is(err, mailbox.ErrDrift) {
				return nil, runner.Permanent(err) // no retry brings the month back: a person looks
			}
			if err != nil {
				return nil, err
			}
			read = append(read, fmt.Sprintf("%s: %d bytes", d.Name, len(b)))
		}
		return read, nil
	})
	extract.CheckSource = func(ctx context.Context, a *runner.Attempt, fp string) ([]string, error) {
		s, err := runner.In[mailbox.Snapshot](ctx, a, "collect")
		if err != nil {
			return nil, err
		}
		if s.Fingerprint() != fp {
			return []string{"the snapshot is not the one the run fingerprinted"}, nil
		}
		return s.Check(ctx, cfg)
	}
	job := app.Job{Name: "invoices", Input: []string{"folder", "cutoff"}, Steps: []app.Step{
		app.Read("collect", collect),
		app.Call("extract", extract),
	}}
	p := job.Pipeline()
	fmt.Println(p.Validate(), p.Steps[0].Kind, p.Steps[1].Kind, p.Steps[1].ChecksSource)
	// Output: <nil> source read model call true
}
