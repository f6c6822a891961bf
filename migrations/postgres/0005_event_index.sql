-- Looking up one entity's log (replay, the invariant checker, the admin timeline) by its id.
CREATE INDEX status_events_by_entity ON status_events (entity_id, entity, id);
