package models_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/schemas"
)

// fixedCompletion is what the zero-latency loopback server answers.
var fixedCompletion = []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"bench-model",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"The answer is <answer>42</answer>.","tool_calls":[]},` +
	`"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":57,"completion_tokens":9,"total_tokens":66}}`)

// longCompletion answers with about 2 KB of text, like a reasoning turn.
var longCompletion = []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"bench-model",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat("Let me think about this step by step. ", 55) +
	`<answer>42</answer>"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":3000,"completion_tokens":500,"total_tokens":3500}}`)

func loopbackServer(b *testing.B, completion []byte) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(completion)))
		_, _ = w.Write(completion)
	}))
	b.Cleanup(srv.Close)
	return srv
}

var benchMessages = []schemas.Message{
	{Role: "system", Content: "You are a helpful assistant. Think step by step and answer inside <answer></answer> tags."},
	{Role: "user", Content: "What is six times seven? Show your reasoning briefly."},
}

// longMessages is a Search-R1-like episode at its eighth turn, about 12 KB:
// a 1 KB system prompt, then searches and retrieved passages.
var longMessages = func() []schemas.Message {
	msgs := []schemas.Message{
		{Role: "system", Content: strings.Repeat("Answer the question. Search with <search>query</search>; results come in <information>. ", 11)},
		{Role: "user", Content: "Which whale species has the loudest call, and how loud is it?"},
	}
	for i := range 4 {
		msgs = append(msgs,
			schemas.Message{Role: "assistant", Content: strings.Repeat("I need more facts about whale calls. ", 15) + fmt.Sprintf("<search>whale call loudness %d</search>", i)},
			schemas.Message{Role: "user", Content: "<information>" + strings.Repeat("Doc: The blue whale produces low-frequency calls reaching 188 dB. ", 30) + "</information>"})
	}
	return msgs
}()

// bareRequest is the same body the client sends, built the plainest way.
type bareRequest struct {
	Model              string            `json:"model"`
	Messages           []schemas.Message `json:"messages"`
	Temperature        float64           `json:"temperature"`
	TopP               float64           `json:"top_p"`
	TopK               int               `json:"top_k"`
	MaxTokens          int64             `json:"max_tokens"`
	Seed               int64             `json:"seed"`
	ChatTemplateKwargs map[string]any    `json:"chat_template_kwargs"`
}

type bareResponse struct {
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content   string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
}

// cpuTime is the user and system CPU time used by the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runParallel runs n calls of f over c goroutines and returns the time taken.
func runParallel(b *testing.B, n, c int, f func(i int64) error) time.Duration {
	d, err := modeltest.Parallel(n, c, f)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkChatVsBareHTTP compares Client.Chat with a bare net/http +
// encoding/json loop posting the same body to the same zero-latency
// loopback server at the same concurrency, in the same run. ratio is
// client calls/s over bare calls/s; cpu_ratio the same per CPU-second.
func BenchmarkChatVsBareHTTP(b *testing.B) {
	payloads := []struct {
		name       string
		msgs       []schemas.Message
		completion []byte
	}{
		{"small", benchMessages, fixedCompletion},
		{"12KB_in_2KB_out", longMessages, longCompletion},
	}
	for _, pl := range payloads {
		for _, conc := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("%s/callers=%d", pl.name, conc), func(b *testing.B) {
				benchChatVsBare(b, pl.msgs, pl.completion, conc)
			})
		}
	}
}

func benchChatVsBare(b *testing.B, msgs []schemas.Message, completion []byte, conc int) {
	srv := loopbackServer(b, completion)
	base := srv.URL + "/v1"
	client, err := models.New(models.Config{
		Endpoints:   []string{base},
		Model:       "bench-model",
		Concurrency: conc,
		Sampling:    models.Sampling{Temperature: models.Ptr(1.0), TopP: models.Ptr(1.0), TopK: models.Ptr(20), MaxTokens: models.Ptr[int64](8192)},
		Extra:       map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": false}},
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc + 4}}
	url := base + "/chat/completions"
	bare := func(i int64) error {
		body, err := json.Marshal(bareRequest{Model: "bench-model", Messages: msgs, Temperature: 1, TopP: 1, TopK: 20,
			MaxTokens: 8192, Seed: i, ChatTemplateKwargs: map[string]any{"enable_thinking": false}})
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		var out bareResponse
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
			return err
		}
		if res.StatusCode != 200 || len(out.Choices) != 1 {
			return fmt.Errorf("bare: status %d, %d choices", res.StatusCode, len(out.Choices))
		}
		return nil
	}
	viaClient := func(i int64) error {
		res, err := client.Chat(context.Background(), models.Request{Messages: msgs, Seed: &i})
		if err != nil {
			return err
		}
		if res.Content == "" {
			return fmt.Errorf("client: empty content")
		}
		return nil
	}
	// Warm both connection pools so neither pays for dialing.
	runParallel(b, 2*conc, conc, bare)
	runParallel(b, 2*conc, conc, viaClient)
	b.ResetTimer()
	// Many short rounds in alternating order, so that load from
	// elsewhere on the machine hits both sides alike.
	const rounds = 10
	var bareTime, clientTime, bareCPU, clientCPU time.Duration
	bareN, clientN := 0, 0
	for r := range rounds {
		n := b.N / rounds
		if r < b.N%rounds {
			n++
		}
		if n == 0 {
			continue
		}
		sides := []func(){
			func() {
				c0 := cpuTime()
				bareTime += runParallel(b, n, conc, bare)
				bareCPU += cpuTime() - c0
				bareN += n
			},
			func() {
				c0 := cpuTime()
				clientTime += runParallel(b, n, conc, viaClient)
				clientCPU += cpuTime() - c0
				clientN += n
			},
		}
		if r%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		sides[0]()
		sides[1]()
	}
	bareRate := float64(bareN) / bareTime.Seconds()
	clientRate := float64(clientN) / clientTime.Seconds()
	b.ReportMetric(bareRate, "bare_calls/s")
	b.ReportMetric(clientRate, "client_calls/s")
	b.ReportMetric(clientRate/bareRate, "ratio")
	// Calls per CPU-second of the whole process (client and server
	// alike): steadier than wall time when the machine is shared.
	bareCPURate := float64(bareN) / bareCPU.Seconds()
	clientCPURate := float64(clientN) / clientCPU.Seconds()
	b.ReportMetric(bareCPURate, "bare_calls/cpu_s")
	b.ReportMetric(clientCPURate, "client_calls/cpu_s")
	b.ReportMetric(clientCPURate/bareCPURate, "cpu_ratio")
}

// BenchmarkChatSequential is Client.Chat alone, one caller, for profiling.
func BenchmarkChatSequential(b *testing.B) {
	srv := loopbackServer(b, fixedCompletion)
	client, err := models.New(models.Config{Endpoints: []string{srv.URL + "/v1"}, Model: "bench-model",
		Sampling: models.Sampling{Temperature: models.Ptr(1.0), TopP: models.Ptr(1.0), TopK: models.Ptr(20), MaxTokens: models.Ptr[int64](8192)},
		Extra:    map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": false}},
		Logger:   slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := range int64(b.N) {
		if _, err := client.Chat(context.Background(), models.Request{Messages: benchMessages, Seed: &i}); err != nil {
			b.Fatal(err)
		}
	}
}
