// Package chess is the chess-puzzle domain: the environment (a Lichess
// puzzle the solver plays move by move) and its verifier.
//
// Contract:
//   - A Puzzle follows the Lichess convention: the FEN is the position
//     before the opponent's move Moves[0], which NewPuzzle applies; the
//     solver plays Moves[1], Moves[3], ..., and the opponent's replies
//     Moves[2], Moves[4], ... are applied automatically. The whole line is
//     checked for legality up front; a bad puzzle is an error wrapping
//     ErrBadPuzzle that names the puzzle and the move index.
//   - Play takes one move in UCI (e2e4, e7e8q, castling as e1g1 or e1h1) or
//     SAN (Nf3, exd5, e8=Q, O-O, 0-0-0; check marks and !/? annotations are
//     ignored). Text that is not a move is ErrUnparseable; a move that is
//     not legal here is ErrIllegal; SAN that names several legal moves is
//     ErrAmbiguous (which errors.Is also reports as ErrIllegal). None of
//     these advances or fails the puzzle: retry budgets belong to the
//     harness, which can read the counts from Counts.
//   - A legal move must equal the solution move, except that any move that
//     gives checkmate wins (a mate ends the game, so it is accepted at any
//     solver step, which covers mate-in-one puzzles with several mates).
//     A legal wrong move fails the puzzle. Reward is 1 only when solved.
//   - Position and the read-only Puzzle methods (FEN, ASCII, legal moves,
//     side to move, last move) are pure, cheap and safe for concurrent use;
//     they are what harness code may see. Play mutates the Puzzle and must
//     not run concurrently with anything else on the same Puzzle. Nothing
//     here reveals the solution line before the solver has played.
//
// The move generator is github.com/corentings/chess/v2; its FEN decoder
// writes a package-level buffer, so decoding is serialised here.
package chess
