package finetune

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/whalerun/whale/internal/redact"
	"github.com/whalerun/whale/internal/retry"
)

// LoadLoRAPath is vLLM's endpoint for loading a LoRA adapter at runtime
// (the server needs VLLM_ALLOW_RUNTIME_LORA_UPDATING=True).
const LoadLoRAPath = "/v1/load_lora_adapter"

// UnloadLoRAPath is vLLM's endpoint for unloading a LoRA adapter.
const UnloadLoRAPath = "/v1/unload_lora_adapter"

// loadLoRA tells every endpoint to load the adapter at loraPath under the
// name modelID. vLLM answers 200 on success, and 400 "… has already been
// loaded" when it holds an adapter of that name. That happens when an
// earlier try of this stage loaded its adapter and then failed before the
// commit; the retrained weights differ, so the old adapter is unloaded
// (/v1/unload_lora_adapter) and the new one loaded in its place. Transport
// errors and retryable statuses (internal/retry: 408, 429, 5xx but 501 and
// 505) are retried twice; any other answer fails the stage.
func (st *Stage) loadLoRA(ctx context.Context, log *slog.Logger, modelID, loraPath string) (int, error) {
	if len(st.ReloadEndpoints) == 0 {
		return 0, errors.New("finetune: reload is vllm-lora but no endpoints are configured (model.endpoints)")
	}
	client := st.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Minute}
	}
	load, err := json.Marshal(map[string]string{"lora_name": modelID, "lora_path": loraPath})
	if err != nil {
		return 0, err
	}
	unload, err := json.Marshal(map[string]string{"lora_name": modelID})
	if err != nil {
		return 0, err
	}
	for _, ep := range st.ReloadEndpoints {
		u, err := loraURL(ep, LoadLoRAPath)
		if err != nil {
			return 0, err
		}
		already, err := st.post(ctx, client, u, load)
		if err != nil {
			return 0, err
		}
		if already {
			log.Warn("finetune: the server holds an adapter of this name from an earlier try; replacing it", "endpoint", redact.URL(u), "lora_name", modelID)
			uu, _ := loraURL(ep, UnloadLoRAPath)
			if _, err := st.post(ctx, client, uu, unload); err != nil {
				return 0, err
			}
			if already, err = st.post(ctx, client, u, load); err != nil {
				return 0, err
			} else if already {
				return 0, fmt.Errorf("finetune: load adapter at %s: still loaded after unloading %q", redact.URL(u), modelID)
			}
		}
		log.Info("finetune: adapter loaded", "endpoint", redact.URL(u), "lora_name", modelID, "lora_path", loraPath)
	}
	return len(st.ReloadEndpoints), nil
}

// loraURL turns a base URL (http://host:8000/v1 or http://host:8000) into
// the URL of endpoint (LoadLoRAPath or UnloadLoRAPath).
func loraURL(base, endpoint string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(base))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("finetune: reload endpoint %q: want an http(s) base URL such as http://host:8000/v1", redact.URL(base))
	}
	p := strings.TrimSuffix(u.Path, "/")
	p = strings.TrimSuffix(p, "/v1")
	u.Path = p + endpoint
	u.RawQuery, u.Fragment = "", ""
	return u.String(), nil
}

// reloadRetry is how a reload request is retried: three tries, about a
// second apart at first.
var reloadRetry = retry.Policy{Attempts: 3, Base: time.Second, Max: 5 * time.Second}

// post sends body to u; already reports a 400 that says the adapter is
// already loaded.
func (st *Stage) post(ctx context.Context, client *http.Client, u string, body []byte) (already bool, err error) {
	err = retry.Do(ctx, reloadRetry, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		if err != nil {
			return retry.Permanent(redact.Error(err))
		}
		req.Header.Set("Content-Type", "application/json")
		if st.APIKey != "" {
			req.Header.Set("Authorization", "Bearer "+st.APIKey)
		}
		resp, err := client.Do(req)
		if err != nil {
			// net/http's error quotes the request URL, query and all.
			return retry.MarkTransport(redact.Error(err))
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		text := strings.TrimSpace(string(msg))
		switch {
		case resp.StatusCode/100 == 2:
			return nil
		case resp.StatusCode == http.StatusBadRequest && strings.Contains(strings.ToLower(text), "already"):
			already = true
			return nil
		}
		return retry.MarkStatus(fmt.Errorf("HTTP %d: %s", resp.StatusCode, text), resp.StatusCode, resp.Header)
	})
	if err != nil {
		return false, fmt.Errorf("finetune: %s: %w", redact.URL(u), err)
	}
	return already, nil
}
