// Package searchqa is the search question-answering domain (the Search-R1
// setup): the verifier, retrieval over a Wikipedia-style passage corpus,
// and the Search-R1 retrieval HTTP API on both sides.
//
// Contract:
//
//   - Verify scores a model response: the answer is the text of the last
//     closed <answer>...</answer> in what the model wrote (never the
//     prompt); Reward is 1 exactly when it matches a gold answer after SQuAD
//     normalisation (Search-R1's qa_em.py), else 0. SubEM and F1 are
//     reported beside it and never change the reward.
//
//   - A Retriever answers a batch of queries with up to topk passages each,
//     best first; Passage.Contents is the corpus text whose first line is
//     the title. Client (a Search-R1 retrieval server, with retries) and
//     Index (an embedded bleve BM25 index) implement it; NewServer serves
//     any Retriever under the same API.
//
//   - BuildIndex streams a corpus (JSONL or Parquet, {"id", "contents"})
//     into a new directory in batches, so memory stays flat; the directory
//     appears only when complete. UploadIndex commits it to a bucket as
//     indexes/<name>/ through storage's commit protocol, as a dataset is:
//     one tar+zstd archive, then _MANIFEST.json (its size and sha256, the
//     corpus digest and format) written last with a create-only write.
//     OpenStored, the one way to open a stored index, downloads the archive
//     to a temporary file and checks its size and sha256 against the
//     manifest before unpacking a byte of it, then unpacks it into a cache
//     directory named by the corpus digest, reused on later calls, writing
//     no more files and bytes than the manifest's summary records.
//
//   - NewDomain is the episode environment (env.go): searches go through
//     the Retriever, answers are graded by exact match.
//
// The package imports storage, schemas, harness (its contract), models and
// episode (the environment interface) of whale, and nothing above them.
package searchqa
