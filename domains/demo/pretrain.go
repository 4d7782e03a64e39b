package demo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/schemas"
)

// AnswerCue is the sentence that asks for a tagged answer. Pretraining
// teaches the model to write <answer>N</answer> when this cue (or any
// text holding "<answer>N</answer>") is in a system or user message, and
// mostly prose ("The result is N.") when it is not: the format depends on
// the harness, which is what makes the harness lever real.
const AnswerCue = "Give the answer as <answer>N</answer>."

// cueMark is what the model keys on: a feedback message that names the
// tag format counts as a cue too.
const cueMark = "<answer>N</answer>"

// untaggedTagRate is how often the model writes tags with no cue: rare
// enough that h0's strict parser loses most answers, common enough that
// RSFT under h0 finds tagged correct answers to learn from.
const untaggedTagRate = 0.2

var systemBases = []string{
	"Solve the arithmetic problem.",
	"You are a calculator.",
	"Compute the result.",
	"You are a helpful assistant.",
	"",
}

// NoiseSentences are prompt lines with no bearing on the format: among
// them the ones the mutate proposer adds, so that a prompt edit changes
// what it says it changes and not the format by accident. The search
// demo's pretraining (domains/searchdemo) uses them too.
var NoiseSentences = []string{
	"Think step by step before you commit to a final answer.",
	"Before you answer, check your result against the question once more.",
	"Follow the required output format exactly: a reply in any other format is wasted.",
	"Be concise: keep your reasoning short and to the point.",
	"When you are unsure, use the tools you are given to gather facts before answering.",
	"Read the task carefully and identify exactly what is asked before you start.",
	"Be accurate.",
	"Double-check the digits.",
}

// UserSuffixes are the lines the mutate proposer may add after the
// question.
var UserSuffixes = []string{
	"Think it through step by step.",
	"Give your final answer in the required format.",
}

var proseTemplates = []string{"The result is %d.", "The answer is %d.", "%s = %d."}

// feedbacks are what a harness says after an unreadable reply; %s is the
// parse error. The first is the base contract's default on_error applied
// to h0's parse error.
var feedbacks = []string{
	"Your reply could not be understood: %s. Please reply again, following the required format.",
	"Wrong format (%s). " + AnswerCue,
	"Reply with " + cueMark + " only.",
}

// ParseError is h0's parse_action error: it names the tag format, so the
// feedback built from it is a cue.
const ParseError = "no " + cueMark + " in the reply"

// answerNoise is the share of pretraining replies whose number is off by
// one or two: the model learns arithmetic as a distribution whose mode is
// right, so sampled at temperature 1 it is often wrong, and RSFT on its
// verified answers has something to sharpen (the weight lever).
const answerNoise = 0.25

// Conversation is one pretraining example for problem p: a system prompt,
// the question, and the reply the cue calls for; sometimes an untagged
// reply, feedback naming the format, and a tagged reply. The number in
// the replies is p's answer, or with probability answerNoise a near miss.
func Conversation(rng *rand.Rand, p Problem) []schemas.Message {
	ans := p.Answer()
	if rng.Float64() < answerNoise {
		if d := []int{-2, -1, 1, 2}[rng.IntN(4)]; ans+d >= 0 {
			ans += d
		} else {
			ans -= d
		}
	}
	// Most conversations use h0's system prompt: with learned absolute
	// positions a fixed layout is what lets a model this small learn the
	// facts within the pretraining budget. The rest vary the prompts so the
	// format keys on the cue, not on the layout.
	var sys []string
	if rng.Float64() < 0.6 {
		sys = append(sys, systemBases[0])
	} else {
		if b := systemBases[rng.IntN(len(systemBases))]; b != "" {
			sys = append(sys, b)
		}
		if rng.IntN(2) == 0 {
			sys = append(sys, NoiseSentences[rng.IntN(len(NoiseSentences))])
		}
	}
	user := p.Question()
	if rng.IntN(8) == 0 {
		user += "\n" + UserSuffixes[rng.IntN(len(UserSuffixes))]
	}
	cue := rng.IntN(2) == 0
	if cue {
		// h0's ANSWER_CUE puts the cue after the question; a prompt edit
		// could put it in the system prompt.
		if rng.Float64() < 0.7 {
			user += "\n" + AnswerCue
		} else {
			at := rng.IntN(len(sys) + 1)
			sys = append(sys[:at], append([]string{AnswerCue}, sys[at:]...)...)
		}
	}
	var msgs []schemas.Message
	if len(sys) > 0 {
		msgs = append(msgs, schemas.Message{Role: "system", Content: strings.Join(sys, " ")})
	}
	msgs = append(msgs, schemas.Message{Role: "user", Content: user})
	tagged := fmt.Sprintf("<answer>%d</answer>", ans)
	if cue || rng.Float64() < untaggedTagRate {
		return append(msgs, schemas.Message{Role: "assistant", Content: tagged})
	}
	msgs = append(msgs, schemas.Message{Role: "assistant", Content: prose(rng, p, ans)})
	if rng.IntN(4) == 0 {
		fb := feedbacks[rng.IntN(len(feedbacks))]
		if strings.Contains(fb, "%s") {
			fb = fmt.Sprintf(fb, ParseError)
		}
		retry := append(msgs,
			schemas.Message{Role: "user", Content: fb},
			schemas.Message{Role: "assistant", Content: tagged})
		// A retry that would not fit the context is left out, so every
		// conversation trains whole.
		if toks, _, err := local.Encode(retry, false); err == nil && len(toks) <= local.DemoConfig().Context {
			return retry
		}
	}
	return msgs
}

func prose(rng *rand.Rand, p Problem, ans int) string {
	t := proseTemplates[rng.IntN(len(proseTemplates))]
	if strings.HasPrefix(t, "%s") {
		return fmt.Sprintf(t, fmt.Sprintf("%d %c %d", p.A, p.Op, p.B), ans)
	}
	return fmt.Sprintf(t, ans)
}

// PretrainOptions configure Pretrain; zero fields take the defaults of
// the committed checkpoint (DefaultPretrain).
type PretrainOptions = local.PretrainOptions

// DefaultPretrain are the options of testdata/pretrained.wlm.
var DefaultPretrain = PretrainOptions{Seed: 1, Steps: 1200, Batch: 32, LR: 3e-3, Warmup: 60, LogEvery: 100}

// Pretrain makes the demo's starting model from scratch (local.Pretrain
// of DemoConfig) on conversations it generates from every problem: the
// 255 facts are a lookup table a model cannot learn from some of them, so
// held-out tasks test the policy (format, sharpened answers), not unseen
// arithmetic.
func Pretrain(ctx context.Context, o PretrainOptions) (*local.Model, error) {
	train := allProblems()
	ctxLen := local.DemoConfig().Context
	return local.Pretrain(ctx, local.DemoConfig(), o.Or(DefaultPretrain), func(rng *rand.Rand) (local.Example, bool, error) {
		conv := Conversation(rng, train[rng.IntN(len(train))])
		toks, mask, err := local.Encode(conv, false)
		if err != nil {
			return local.Example{}, false, err
		}
		// Never happens with these templates; skipping keeps the stream fixed.
		return local.Example{Tokens: toks, Mask: mask}, len(toks) <= ctxLen, nil
	})
}
