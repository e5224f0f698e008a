package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/mail"
	"net/url"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/identity"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/runner"
)

// Notices say where a pipeline's handover and approval notices go: a mail to Email and a
// signed POST of the note to Webhook, each queued through the pipeline's outbox by the
// service that handed the run over or made it wait (a step, or the supervisor), keyed by the
// note's id so that a note notifies once. They are the settings CAIRN_NOTIFY_EMAIL,
// CAIRN_NOTIFY_WEBHOOK and CAIRN_NOTIFY_SECRET. A notice is sent whatever state the run's
// record is in (outbox.Message.Notice): the runs whose records cannot be trusted are exactly
// the ones a person must look at.
type Notices struct {
	Email   string // CAIRN_NOTIFY_EMAIL: a mail per note to this address; "" sends none
	Webhook string // CAIRN_NOTIFY_WEBHOOK: a POST per note to this http(s) URL; "" sends none
	// Secret signs every webhook call (CAIRN_NOTIFY_SECRET; outbox.WebhookTransport): required
	// with Webhook.
	Secret []byte
	// From is the address notices are sent as; default the Outbox's Allow.From, else
	// DefaultFrom.
	From string
	// Mail delivers the mail notices of a pipeline that has no Outbox of its own (an
	// outbox.SMTPTransport, or an outbox.FileTransport writing a folder); with an Outbox, its
	// Transport delivers them.
	Mail outbox.Transport
}

// DefaultFrom is the address Cairn's messages are sent as when none is configured.
const DefaultFrom = "cairn@cairn.local"

// Any reports whether any notice is sent.
func (n Notices) Any() bool { return n.Email != "" || n.Webhook != "" }

// Validate returns one sentence per broken rule, naming the variable.
func (n Notices) Validate() error {
	var errs []error
	if n.Email != "" {
		if _, err := mail.ParseAddress(n.Email); err != nil {
			errs = append(errs, fmt.Errorf("CAIRN_NOTIFY_EMAIL %q is not a mail address", n.Email))
		}
	}
	if n.Webhook != "" {
		if u, err := url.Parse(n.Webhook); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("CAIRN_NOTIFY_WEBHOOK %q must be an http(s) URL", n.Webhook))
		} else if u.User != nil {
			errs = append(errs, errors.New("CAIRN_NOTIFY_WEBHOOK must carry no user or password: the URL is written into every notice's outbox message (CAIRN_NOTIFY_SECRET signs the calls)"))
		}
		if len(n.Secret) == 0 {
			errs = append(errs, errors.New("CAIRN_NOTIFY_SECRET must be set with CAIRN_NOTIFY_WEBHOOK: every call is signed with it"))
		}
	}
	return errors.Join(errs...)
}

// Messages are the outbox messages that tell of note: kind is outbox.KindHandover or
// outbox.KindApproval, from the address the mail is sent as, generation and token those of
// the run and the attempt that wrote the note (0 for the supervisor's).
func (n Notices) Messages(kind string, note runner.HandoverNote, from string, generation int, token uint64, now time.Time) []outbox.Message {
	step := note.Step
	if step == "" {
		step = "run"
	}
	base := outbox.Message{RunID: note.RunID, Kind: kind, Step: step, Generation: generation, Token: token,
		From: from, QueuedAt: now.UTC().Round(time.Second)}
	var msgs []outbox.Message
	if n.Email != "" {
		m := base
		m.Key, m.To = note.ID+":mail", []string{n.Email}
		what := "needs a person"
		if kind == outbox.KindApproval {
			what = "waits for your approval"
		}
		m.Subject = fmt.Sprintf("Cairn: run %s %s (step %s)", note.RunID, what, step)
		m.Body = fmt.Sprintf("Run %s %s.\n\nStep:    %s\nWhy:     %s\nDone:    %d keys, %d messages\nNext:    %s\nNote:    %s (%s)\n",
			note.RunID, what, step, note.Error, note.Done.Keys, note.Done.Messages, note.NextAction, note.ID, note.At)
		msgs = append(msgs, m)
	}
	if n.Webhook != "" {
		body, err := json.Marshal(struct {
			Kind string              `json:"kind"`
			Note runner.HandoverNote `json:"note"`
		}{kind, note})
		if err == nil {
			m := base
			m.Key, m.To, m.Subject, m.Body = note.ID+":webhook", []string{n.Webhook}, kind+" "+note.RunID, string(body)
			msgs = append(msgs, m)
		}
	}
	return msgs
}

// Notifier is the runner's and the supervisor's Notify for the service whose key is by, in
// space sp: it queues n's messages of each note, signed by by, sent as from. A message that
// cannot be queued is logged; the handover itself stands (its note is in the handover bucket).
func (n Notices) Notifier(js jetstream.JetStream, sp assets.Space, by *identity.Signer, from string, now func() time.Time, log *slog.Logger) func(ctx context.Context, kind string, note runner.HandoverNote, generation int, token uint64) {
	if !n.Any() {
		return nil
	}
	return func(ctx context.Context, kind string, note runner.HandoverNote, generation int, token uint64) {
		for _, m := range n.Messages(kind, note, from, generation, token, now()) {
			if err := outbox.Queue(ctx, js, m, outbox.SignedBy(by), outbox.In(sp)); err != nil {
				log.Error("queueing a notification", slog.String("run_id", note.RunID), slog.String("key", m.Key), slog.Any("error", err))
			}
		}
	}
}

// allow is a, widened to the notices: the webhook they go to, and their mail to Email only.
func (n Notices) allow(a outbox.Allow) outbox.Allow {
	if n.Webhook != "" {
		a.Webhook = n.Webhook
	}
	if a.From == "" {
		a.From = n.From
	}
	steps := a.Mail
	a.Mail = func(kind, to string) bool {
		if kind == outbox.KindHandover || kind == outbox.KindApproval {
			return n.Email != "" && to == n.Email
		}
		return steps != nil && steps(kind, to)
	}
	return a
}

// noticeRoute sends the notices' webhook calls through their own transport (signed by the
// notices' secret), their mail through mail (the pipeline's own transport when the notices
// name none), and every other message through the pipeline's own transport.
type noticeRoute struct {
	webhook, mail, rest outbox.Transport
}

func (r noticeRoute) pick(m outbox.Message) outbox.Transport {
	switch {
	case m.Notice() && m.Webhook() && r.webhook != nil:
		return r.webhook
	case m.Notice() && r.mail != nil:
		return r.mail
	}
	return r.rest
}

func (r noticeRoute) Deliver(ctx context.Context, m outbox.Message, raw []byte) error {
	t := r.pick(m)
	if t == nil {
		return fmt.Errorf("%w: no transport delivers message %q (kind %s)", outbox.ErrPermanent, m.Key, m.Kind)
	}
	return t.Deliver(ctx, m, raw)
}

func (r noticeRoute) Delivered(ctx context.Context, m outbox.Message) (bool, error) {
	t := r.pick(m)
	if t == nil {
		return false, nil
	}
	return t.Delivered(ctx, m)
}
