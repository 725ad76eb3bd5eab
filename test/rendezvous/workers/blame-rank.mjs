// A job whose rank 0 fails first, of a peer's death (its error names EPEERDEAD), while the
// rank that really failed (2) exits a moment later: the launcher's summary must name rank 2.
const rank = Number(process.env.WEFT_RANK);
if (rank === 0) {
  console.error("WeftError: rank 2 is gone: its memory segment was removed\n  code: 'EPEERDEAD'");
  process.exit(1);
} else if (rank === 2) {
  setTimeout(() => {
    console.error('rank 2 fails on purpose');
    process.exit(1);
  }, 300);
} else {
  setTimeout(() => {}, 10_000);
}
