package outbox

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"time"
)

// SignatureHeader carries "sha256=<hex HMAC-SHA256 of the body under the shared secret>".
const SignatureHeader = "X-Cairn-Signature"

// Sign is the value of SignatureHeader for body.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// WebhookTransport POSTs a message's body (JSON) to the URL in its To, signed with the
// shared secret. A webhook cannot be asked afterwards whether a call arrived, so a sender
// that died during a call calls again once.
type WebhookTransport struct {
	Secret []byte
	Client *http.Client // default: 10s timeout
}

// Deliver posts m.Body to m.To[0]. 2xx is delivered; 4xx is refused for good (ErrPermanent);
// anything else is worth a retry.
func (t WebhookTransport) Deliver(ctx context.Context, m Message, _ []byte) error {
	c := t.Client
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	body := []byte(m.Body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.To[0], bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: webhook %q: %w", ErrPermanent, m.To[0], err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Cairn-Key", m.Key)
	req.Header.Set(SignatureHeader, Sign(t.Secret, body))
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("webhook %q: %w", m.To[0], err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode/100 == 4:
		return fmt.Errorf("%w: webhook %q answered %s", ErrPermanent, m.To[0], resp.Status)
	default:
		return fmt.Errorf("webhook %q answered %s", m.To[0], resp.Status)
	}
}

// Delivered is false: a webhook cannot be asked.
func (WebhookTransport) Delivered(context.Context, Message) (bool, error) { return false, nil }

// Routed sends messages addressed to an http(s) URL by Webhook, all others by Mail.
type Routed struct {
	Mail    Transport
	Webhook Transport
}

func (r Routed) pick(m Message) Transport {
	if len(m.To) == 1 && isURL(m.To[0]) && r.Webhook != nil {
		return r.Webhook
	}
	return r.Mail
}

// Deliver hands m to its transport.
func (r Routed) Deliver(ctx context.Context, m Message, raw []byte) error {
	return r.pick(m).Deliver(ctx, m, raw)
}

// Delivered asks m's transport.
func (r Routed) Delivered(ctx context.Context, m Message) (bool, error) {
	return r.pick(m).Delivered(ctx, m)
}
