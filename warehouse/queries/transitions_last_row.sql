-- The rowid of the last transition that arrived: where the event feed's cursor moves to.
--
-- Answers "how far has the feed read?".  A follower of transitions_feed.sql moves its cursor
-- ($after_row there) past every row that arrived, matching its filters or not, so a later poll
-- does not read them again.  NULL while the table is empty.
-- Parameters: none.
SELECT max(rowid) AS last_row FROM transitions
