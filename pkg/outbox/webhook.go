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
	"strconv"
	"time"
)

// The headers of a webhook call: the message's key, the time of the call in Unix seconds,
// and "sha256=<hex HMAC-SHA256 under the shared secret of timestamp "." key "." body>".
const (
	KeyHeader       = "X-Cairn-Key"
	TimestampHeader = "X-Cairn-Timestamp"
	SignatureHeader = "X-Cairn-Signature"
)

// Sign is the value of SignatureHeader for a call at ts (Unix seconds, as sent in
// TimestampHeader) carrying the message key and body: the signature covers all three, so
// a signed body cannot be replayed later or under another key.
func Sign(secret []byte, ts, key string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write([]byte(key))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// VerifyWebhook is the receiver's check of a call: the signature in h must be Sign's over
// h's timestamp and key and body, and the timestamp within window of now. Anything else
// wraps ErrSignature. A receiver that must not act twice also remembers the keys it took.
func VerifyWebhook(secret []byte, h http.Header, body []byte, now time.Time, window time.Duration) error {
	ts, key, sig := h.Get(TimestampHeader), h.Get(KeyHeader), h.Get(SignatureHeader)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || key == "" {
		return fmt.Errorf("%w: timestamp %q, key %q", ErrSignature, truncate(ts, 32), truncate(key, 64))
	}
	if d := now.Sub(time.Unix(sec, 0)); d > window || d < -window {
		return fmt.Errorf("%w: timestamp %s is more than %s from now", ErrSignature, time.Unix(sec, 0).UTC().Format(time.RFC3339), window)
	}
	if !hmac.Equal([]byte(sig), []byte(Sign(secret, ts, key, body))) {
		return fmt.Errorf("%w: for key %q", ErrSignature, truncate(key, 64))
	}
	return nil
}

// WebhookTransport POSTs a message's body (JSON) to URL, the one configured webhook, signed
// with the shared secret. A message addressed to any other URL is refused (ErrForbidden):
// the URL a message names is never called. Redirects are not followed: a 3xx answer is a
// refusal, as a 4xx is (the webhook's URL wants fixing). A webhook cannot be asked
// afterwards whether a call arrived, so a sender that died during a call calls again once.
type WebhookTransport struct {
	URL    string // CAIRN_NOTIFY_WEBHOOK
	Secret []byte
	Client *http.Client     // default: 10s timeout; its redirects are never followed
	Now    func() time.Time // the signature's timestamp; default time.Now
}

// noRedirect stops the client at the first redirect, so the 3xx itself is the answer.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Deliver posts m.Body to URL. 2xx is delivered; 3xx and 4xx are refused for good
// (ErrPermanent); anything else is worth a retry.
func (t WebhookTransport) Deliver(ctx context.Context, m Message, _ []byte) error {
	if t.URL == "" || len(m.To) != 1 || m.To[0] != t.URL {
		return fmt.Errorf("%w: %w: webhook message %q is not addressed to the configured webhook", ErrPermanent, ErrForbidden, m.Key)
	}
	c := http.Client{Timeout: 10 * time.Second}
	if t.Client != nil {
		c = *t.Client
	}
	c.CheckRedirect = noRedirect
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	body := []byte(m.Body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: webhook %q: %w", ErrPermanent, t.URL, err)
	}
	ts := strconv.FormatInt(now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(KeyHeader, m.Key)
	req.Header.Set(TimestampHeader, ts)
	req.Header.Set(SignatureHeader, Sign(t.Secret, ts, m.Key, body))
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("webhook %q: %w", t.URL, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode/100 == 3:
		return fmt.Errorf("%w: webhook %q answered %s (to %q): redirects are not followed", ErrPermanent, t.URL, resp.Status, truncate(resp.Header.Get("Location"), 256))
	case resp.StatusCode/100 == 4:
		return fmt.Errorf("%w: webhook %q answered %s", ErrPermanent, t.URL, resp.Status)
	default:
		return fmt.Errorf("webhook %q answered %s", t.URL, resp.Status)
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
	if m.Webhook() && r.Webhook != nil {
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
