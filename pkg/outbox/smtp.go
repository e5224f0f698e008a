package outbox

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"time"

	"github.com/emersion/go-smtp"
)

// DefaultSMTPTimeout bounds one delivery when SMTPTransport.Timeout is zero. It stays
// well inside the outbox consumer's 30 s ack wait, so a message is not handed to a
// second sender while the first is still talking to the relay.
const DefaultSMTPTimeout = 10 * time.Second

// SMTPTransport sends to a local relay at Addr, without authentication or TLS.
//
// SMTP cannot be asked afterwards whether a message went: Delivered always reports
// false, and a message whose sender died mid-call is sent once more.
type SMTPTransport struct {
	Addr    string
	Timeout time.Duration // one whole delivery; DefaultSMTPTimeout when zero
}

// Deliver sends raw to m.To. A 5xx reply wraps ErrPermanent; anything else (a
// refused connection, a timeout, a 4xx reply) is temporary.
func (t SMTPTransport) Deliver(ctx context.Context, m Message, raw []byte) error {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(t.Timeout, DefaultSMTPTimeout))
	defer cancel()

	from, to, err := envelope(m)
	if err != nil {
		return err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", t.Addr)
	if err != nil {
		return fmt.Errorf("connecting to smtp relay %q: %w", t.Addr, err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(deadline); err != nil {
			conn.Close()
			return fmt.Errorf("setting smtp deadline: %w", err)
		}
	}
	// A cancelled context ends a call blocked on the network at once.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	c := smtp.NewClient(conn)
	defer c.Close()
	if err := c.Hello("cairn.local"); err != nil {
		return smtpError(m.Key, "greeting", err)
	}
	if err := c.SendMail(from, to, bytes.NewReader(raw)); err != nil {
		return smtpError(m.Key, "sending", err)
	}
	// The relay took the message at the end of DATA; a failed QUIT changes nothing.
	_ = c.Quit()
	return nil
}

// Delivered is always false: SMTP has no way to ask.
func (SMTPTransport) Delivered(context.Context, Message) (bool, error) {
	return false, nil
}

// envelope returns the bare addresses for MAIL FROM and RCPT TO.
func envelope(m Message) (string, []string, error) {
	from, err := mail.ParseAddress(m.From)
	if err != nil {
		return "", nil, fmt.Errorf("%w %q: from %q: %v", ErrInvalid, m.Key, m.From, err)
	}
	to := make([]string, 0, len(m.To))
	for _, s := range m.To {
		addr, err := mail.ParseAddress(s)
		if err != nil {
			return "", nil, fmt.Errorf("%w %q: to %q: %v", ErrInvalid, m.Key, s, err)
		}
		to = append(to, addr.Address)
	}
	return from.Address, to, nil
}

func smtpError(key, doing string, err error) error {
	var se *smtp.SMTPError
	if errors.As(err, &se) && se.Code >= 500 {
		return fmt.Errorf("%s mail %q: %w: %w", doing, key, ErrPermanent, err)
	}
	return fmt.Errorf("%s mail %q: %w", doing, key, err)
}
