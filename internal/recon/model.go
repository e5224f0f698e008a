package recon

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cairnhq/cairn/pkg/ratelimit"
	"github.com/cairnhq/cairn/pkg/retry"
)

// ModelPromptVersion is the version of ModelPrompt; a change is a version change of extract.
const ModelPromptVersion = "lines-model-v1"

// ModelPrompt asks for the line-item JSON that ParseAnswer reads.
const ModelPrompt = `You read one supplier invoice (plain text) and answer with one JSON object and nothing else:
{"invoice_no": string, "supplier_id": string, "supplier_name": string, "warehouse": string,
 "date": "YYYY-MM-DD", "po_ref": string,
 "lines": [{"no": int from 1, "sku": string, "desc": string, "qty": int, "unit_paise": int, "amount_paise": int}],
 "total_paise": int}
Money is in paise (rupees × 100, integers). The supplier id and the warehouse code are the bracketed codes.
If the document is not an invoice you can read, answer {"unreadable": "<why>"}.`

// ModelExtractor asks an OpenAI-compatible chat-completions API. Its answer is the model's
// message content, word for word; an answer that is not line-item JSON, or a refusal, is
// an UnreadableError (the invoice is parked); 429, 5xx and timeouts wrap
// retry.ErrTemporary; any other failure (a wrong key, a wrong model name) is neither, and
// stops the run.
type ModelExtractor struct {
	BaseURL string // e.g. https://api.openai.com/v1
	Model   string
	Key     string
	Client  *http.Client // default: http.DefaultClient
	// Timeout bounds each call, from its grant by Limiter to the end of the answer: the wait
	// for the limit is not part of it.
	Timeout time.Duration
	Limiter *ratelimit.Limiter // the model's calls per second, shared by every instance; nil: unlimited
	// MaxRetryAfter bounds how long a 429's Retry-After is honoured; default 30s.
	MaxRetryAfter time.Duration
}

var _ Extractor = (*ModelExtractor)(nil)

// NewModelExtractor makes an extractor for baseURL and model, each call granted by lim
// (nil: unlimited) and then given timeout (default 60s).
func NewModelExtractor(baseURL, model, key string, lim *ratelimit.Limiter, timeout time.Duration) *ModelExtractor {
	return &ModelExtractor{BaseURL: strings.TrimRight(baseURL, "/"), Model: model, Key: key, Limiter: lim,
		Timeout: cmp.Or(timeout, 60*time.Second), Client: http.DefaultClient}
}

// Versions are the prompt's version, the schema ParseAnswer checks, and the model's name.
func (m *ModelExtractor) Versions() ExtractorVersions {
	return ExtractorVersions{Prompt: ModelPromptVersion, Schema: RuleSchemaVersion, Model: m.Model}
}

type chatRequest struct {
	Model          string            `json:"model"`
	Messages       []chatMessage     `json:"messages"`
	Temperature    float64           `json:"temperature"`
	ResponseFormat map[string]string `json:"response_format"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatResponse struct {
	Choices []struct {
		FinishReason string `json:"finish_reason"`
		Message      struct {
			Content string  `json:"content"`
			Refusal *string `json:"refusal"`
		} `json:"message"`
	} `json:"choices"`
}

// Extract asks the model about one document.
func (m *ModelExtractor) Extract(ctx context.Context, invoiceNo string, doc []byte) ([]byte, error) {
	if m.Limiter != nil {
		if _, err := m.Limiter.Wait(ctx); err != nil {
			if errors.Is(err, ratelimit.ErrState) {
				return nil, fmt.Errorf("waiting for the model's rate limit: %w", err)
			}
			return nil, fmt.Errorf("%w: waiting for the model's rate limit: %w", retry.ErrTemporary, err)
		}
	}
	// The call's time starts at its grant.
	callCtx, cancel := context.WithTimeout(ctx, cmp.Or(m.Timeout, 60*time.Second))
	defer cancel()
	body, err := json.Marshal(chatRequest{
		Model: m.Model, Temperature: 0, ResponseFormat: map[string]string{"type": "json_object"},
		Messages: []chatMessage{{Role: "system", Content: ModelPrompt}, {Role: "user", Content: string(doc)}},
	})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(callCtx, http.MethodPost, m.BaseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("the model's URL: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if m.Key != "" {
		req.Header.Set("Authorization", "Bearer "+m.Key)
	}
	resp, err := cmp.Or(m.Client, http.DefaultClient).Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: asking the model about %s: %w", retry.ErrTemporary, invoiceNo, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%w: reading the model's answer about %s: %w", retry.ErrTemporary, invoiceNo, err)
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		m.pause(ctx, resp.Header.Get("Retry-After"))
		return nil, fmt.Errorf("%w: the model is rate limited (429) for %s", retry.ErrTemporary, invoiceNo)
	case resp.StatusCode >= 500:
		return nil, fmt.Errorf("%w: the model answered %d for %s", retry.ErrTemporary, resp.StatusCode, invoiceNo)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("the model refused the request for %s: %d %s", invoiceNo, resp.StatusCode, cut(string(raw), 200))
	}
	var cr chatResponse
	if err := json.Unmarshal(raw, &cr); err != nil || len(cr.Choices) == 0 {
		return nil, invalidAnswer(unreadable(invoiceNo, "the model's reply is not a chat completion: %s", cut(string(raw), 120)))
	}
	c := cr.Choices[0]
	if c.Message.Refusal != nil && *c.Message.Refusal != "" {
		return nil, unreadable(invoiceNo, "the model refused: %s", cut(*c.Message.Refusal, 120))
	}
	if c.FinishReason == "content_filter" || c.FinishReason == "length" {
		return nil, unreadable(invoiceNo, "the model's answer was cut (%s)", c.FinishReason)
	}
	answer := []byte(c.Message.Content)
	var why struct {
		Unreadable string `json:"unreadable"`
	}
	if json.Unmarshal(answer, &why) == nil && why.Unreadable != "" {
		return nil, unreadable(invoiceNo, "the model could not read it: %s", cut(why.Unreadable, 120))
	}
	if _, err := ParseAnswer(answer); err != nil {
		return nil, err // an *UnreadableError: the answer is not line-item JSON
	}
	return answer, nil
}

// pause honours a 429's Retry-After (seconds or an HTTP date), within MaxRetryAfter.
func (m *ModelExtractor) pause(ctx context.Context, retryAfter string) {
	var d time.Duration
	if s, err := strconv.Atoi(strings.TrimSpace(retryAfter)); err == nil {
		d = time.Duration(s) * time.Second
	} else if t, err := http.ParseTime(retryAfter); err == nil {
		d = time.Until(t)
	}
	d = min(d, cmp.Or(m.MaxRetryAfter, 30*time.Second))
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
