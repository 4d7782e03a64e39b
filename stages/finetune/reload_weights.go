package finetune

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/whalerun/whale/internal/redact"
)

// vLLM's development endpoints, which the server mounts only with
// VLLM_SERVER_DEV_MODE=1 (FastAPI answers 404 {"detail":"Not Found"}
// otherwise). Checked against vLLM 0.28 (the serve/rpc and serve/cache
// routers; reload_weights(weights_path=…) of the GPU model runner).
const (
	// CollectiveRPCPath runs a method on every worker of the engine:
	// {"method": "reload_weights", "kwargs": {"weights_path": DIR}} loads
	// the Hugging Face checkpoint in DIR (config.json + *.safetensors) into
	// the running model in place and answers {"results": [null, …]} when
	// every worker has finished. The architecture and shapes must be the
	// model's: it replaces weights, not the model. The server keeps
	// serving under its --served-model-name, which /v1/models lists and
	// requests must name, and /v1/models keeps the start directory as
	// "root"; only the weights change.
	CollectiveRPCPath = "/collective_rpc"
	// ResetPrefixCachePath drops the prefix cache, whose KV blocks were
	// computed with the old weights and would otherwise be reused.
	ResetPrefixCachePath = "/reset_prefix_cache"
)

// WeightsLoadTimeout bounds one reload_weights call: the servers read the
// whole checkpoint from a shared filesystem, tens of GB for a large model.
const WeightsLoadTimeout = 30 * time.Minute

// devModeHint is what a 404 from a development endpoint means.
const devModeHint = "the server has no %s: start vLLM with VLLM_SERVER_DEV_MODE=1 (its development endpoints are off), or use reload: command (jobs/vllm/reload.sh)"

// reloadWeights tells every endpoint to load the full checkpoint in dir
// in place (vllm-weights), then to drop its prefix cache, then checks that
// it still serves served, the name the next rollouts ask for. The calls
// are synchronous: when reload_weights answers, the server has read dir.
//
// A 5xx is retried (internal/retry); a worker that raised mid-load has
// left some layers old and some new, and loading the whole directory again
// is what mends that. When the retries run out the stage fails and
// nothing is committed: the server holds a mix of weights until a rerun of
// the stage loads them again, and the error says so.
func (st *Stage) reloadWeights(ctx context.Context, log *slog.Logger, served, dir string) (int, error) {
	if len(st.ReloadEndpoints) == 0 {
		return 0, errors.New("finetune: reload is vllm-weights but no endpoints are configured (model.endpoints)")
	}
	rpc, err := json.Marshal(map[string]any{"method": "reload_weights", "kwargs": map[string]string{"weights_path": dir}})
	if err != nil {
		return 0, err
	}
	for _, ep := range st.ReloadEndpoints {
		u, err := adminURL(ep, CollectiveRPCPath)
		if err != nil {
			return 0, err
		}
		if _, err := st.call(ctx, http.MethodPost, u, rpc, WeightsLoadTimeout); err != nil {
			var se *statusError
			if errors.As(err, &se) && se.status == http.StatusNotFound {
				return 0, fmt.Errorf("%w: "+devModeHint, err, CollectiveRPCPath)
			}
			return 0, fmt.Errorf("%w; the server may hold a mix of old and new weights until the stage is run again", err)
		}
		log.Info("finetune: weights reloaded", "endpoint", redact.URL(u), "weights_path", dir)
		uc, _ := adminURL(ep, ResetPrefixCachePath)
		if _, err := st.call(ctx, http.MethodPost, uc, nil, callTimeout); err != nil {
			var se *statusError
			if errors.As(err, &se) && se.status == http.StatusNotFound {
				return 0, fmt.Errorf("%w: "+devModeHint, err, ResetPrefixCachePath)
			}
			return 0, err
		}
		list, err := st.listModels(ctx, ep)
		if err != nil {
			return 0, err
		}
		ids := make([]string, len(list))
		for i, m := range list {
			ids[i] = m.ID
		}
		if !slices.Contains(ids, served) {
			um, _ := adminURL(ep, ModelsPath)
			return 0, fmt.Errorf("finetune: %s serves %q, not %q: start vLLM with --served-model-name %s (model.name), the name rollouts request", redact.URL(um), ids, served, served)
		}
	}
	return len(st.ReloadEndpoints), nil
}
