package finetune

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"github.com/whalerun/whale/stages"
)

// LoadLoRAPath is vLLM's endpoint for loading a LoRA adapter at runtime
// (the server needs VLLM_ALLOW_RUNTIME_LORA_UPDATING=True).
const LoadLoRAPath = "/v1/load_lora_adapter"

// UnloadLoRAPath is vLLM's endpoint for unloading a LoRA adapter.
const UnloadLoRAPath = "/v1/unload_lora_adapter"

// ModelsPath lists what a server serves: its served name and the LoRA
// adapters loaded (with their "parent").
const ModelsPath = "/v1/models"

// randRead is where adapter names get their random part (a test sets
// it).
var randRead = rand.Read

// loraModelID is the model id of a LoRA step: "<ModelName>@<run>/<position>"
// then "-a<attempt>-<8 hex digits>", new for every execution. vLLM keeps
// adapters by name, and an uncommitted attempt is resumed under its number
// (storage.OpenAttempt), so a name made of the position or the attempt
// alone could meet an adapter an earlier, failed try loaded, whose weights
// are not this try's. The id is the adapter's name, the id the next
// rollouts request and the id their rows record.
func loraModelID(cfg Config, x *stages.Exec) (string, error) {
	var b [4]byte
	if _, err := randRead(b[:]); err != nil {
		return "", fmt.Errorf("finetune: adapter name: %w", err)
	}
	return fmt.Sprintf("%s-a%d-%s", defaultModelID(cfg, x), x.Attempt, hex.EncodeToString(b[:])), nil
}

// loadLoRA tells every endpoint to load the adapter at loraPath under the
// name modelID, then unloads the adapters that earlier tries of this
// position left loaded (names that start with prefix, other than modelID).
// vLLM answers a load with 200, or 400 "… has already been loaded" for a
// name it holds. When fresh, modelID is new to this execution
// (loraModelID), so that answer is a clash with an adapter whale did not
// load and fails the stage rather than replace it. Otherwise the id came
// from the backend or the trainer (the local backend names a checkpoint
// by its digest; a trainer may write whale_model_id) and may be an
// earlier try's: that adapter is unloaded and this one loaded in its
// place. Transport errors and retryable statuses (internal/retry: 408,
// 429, 5xx but 501 and 505) are retried twice; any other answer fails the
// stage.
func (st *Stage) loadLoRA(ctx context.Context, log *slog.Logger, modelID, loraPath, prefix string, fresh bool) (int, error) {
	if len(st.ReloadEndpoints) == 0 {
		return 0, errors.New("finetune: reload is vllm-lora but no endpoints are configured (model.endpoints)")
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
		u, err := adminURL(ep, LoadLoRAPath)
		if err != nil {
			return 0, err
		}
		_, err = st.call(ctx, http.MethodPost, u, load, callTimeout)
		if alreadyLoaded(err) && !fresh {
			log.Warn("finetune: the server holds an adapter of this name from an earlier try; replacing it", "endpoint", redact.URL(u), "lora_name", modelID)
			uu, _ := adminURL(ep, UnloadLoRAPath)
			if _, err = st.call(ctx, http.MethodPost, uu, unload, callTimeout); err == nil {
				_, err = st.call(ctx, http.MethodPost, u, load, callTimeout)
			}
		}
		if err != nil {
			var se *statusError
			switch {
			case alreadyLoaded(err):
				return 0, fmt.Errorf("%w (whale names each try's adapter anew, so another client loaded %q)", err, modelID)
			case errors.As(err, &se) && se.status == http.StatusNotFound:
				return 0, fmt.Errorf("%w: the server has no %s; start vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora", err, LoadLoRAPath)
			}
			return 0, err
		}
		log.Info("finetune: adapter loaded", "endpoint", redact.URL(u), "lora_name", modelID, "lora_path", loraPath)
		st.unloadStale(ctx, log, ep, modelID, prefix)
	}
	return len(st.ReloadEndpoints), nil
}

// alreadyLoaded reports vLLM's 400 "The lora adapter '…' has already been
// loaded."
func alreadyLoaded(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.status == http.StatusBadRequest && strings.Contains(strings.ToLower(se.text), "already")
}

// unloadStale unloads the adapters of earlier tries of this position from
// the server at ep. They would only hold one of the server's LoRA slots;
// a failure is logged, not returned.
func (st *Stage) unloadStale(ctx context.Context, log *slog.Logger, ep, keep, prefix string) {
	served, err := st.listModels(ctx, ep)
	if err != nil {
		log.Warn("finetune: cannot list the server's adapters to unload those of earlier tries", "err", err)
		return
	}
	for _, m := range served {
		if m.Parent == nil || m.ID == keep || !strings.HasPrefix(m.ID, prefix) {
			continue
		}
		body, _ := json.Marshal(map[string]string{"lora_name": m.ID})
		u, _ := adminURL(ep, UnloadLoRAPath)
		if _, err := st.call(ctx, http.MethodPost, u, body, callTimeout); err != nil {
			log.Warn("finetune: cannot unload the adapter of an earlier try", "lora_name", m.ID, "err", err)
			continue
		}
		log.Info("finetune: unloaded the adapter of an earlier try", "endpoint", redact.URL(u), "lora_name", m.ID)
	}
}

// servedModel is one entry of GET /v1/models.
type servedModel struct {
	ID string `json:"id"`
	// Parent is the base model of a LoRA adapter; nil for a served name.
	Parent *string `json:"parent"`
}

// listModels reads GET /v1/models of the server at ep.
func (st *Stage) listModels(ctx context.Context, ep string) ([]servedModel, error) {
	u, err := adminURL(ep, ModelsPath)
	if err != nil {
		return nil, err
	}
	text, err := st.call(ctx, http.MethodGet, u, nil, callTimeout)
	if err != nil {
		return nil, err
	}
	var list struct {
		Data []servedModel `json:"data"`
	}
	if err := json.Unmarshal([]byte(text), &list); err != nil {
		return nil, fmt.Errorf("finetune: %s: not a model list: %v", redact.URL(u), err)
	}
	return list.Data, nil
}

// adminURL turns a base URL (http://host:8000/v1 or http://host:8000)
// into the URL of endpoint, a path from the server's root
// (LoadLoRAPath, CollectiveRPCPath, …).
func adminURL(base, endpoint string) (string, error) {
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

// statusError is an answer outside 2xx.
type statusError struct {
	status int
	text   string
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.text) }

// callTimeout bounds one try of a control call; reload_weights has its
// own (WeightsLoadTimeout).
const callTimeout = 5 * time.Minute

// call sends a request with body (nil: none) to u with the stage's key
// and returns the answer's text; each try may take timeout. Transport
// errors and retryable statuses are retried (reloadRetry); another status
// is a *statusError at once.
func (st *Stage) call(ctx context.Context, method, u string, body []byte, timeout time.Duration) (string, error) {
	client := st.HTTPClient
	if client == nil {
		client = &http.Client{}
	}
	var out string
	err := retry.Do(ctx, reloadRetry, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, u, rd)
		if err != nil {
			return retry.Permanent(redact.Error(err))
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if st.APIKey != "" {
			req.Header.Set("Authorization", "Bearer "+st.APIKey)
		}
		resp, err := client.Do(req)
		if err != nil {
			// net/http's error quotes the request URL, query and all.
			return retry.MarkTransport(redact.Error(err))
		}
		msg, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil {
			return retry.MarkTransport(redact.Error(err))
		}
		text := strings.TrimSpace(string(msg))
		if resp.StatusCode/100 == 2 {
			out = text
			return nil
		}
		if len(text) > 4<<10 {
			text = text[:4<<10] + "…"
		}
		return retry.MarkStatus(&statusError{resp.StatusCode, text}, resp.StatusCode, resp.Header)
	})
	if err != nil {
		return "", fmt.Errorf("finetune: %s %s: %w", method, redact.URL(u), err)
	}
	return out, nil
}
