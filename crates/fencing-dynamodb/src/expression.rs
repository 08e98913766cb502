//! Condition and update expressions for fenced writes, with every name and value behind a
//! placeholder.

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::{FenceCheck, FencedWrite, FencingToken, Holder, InputKind, InvalidInput, State};

use crate::table::DynamoTable;

/// The most values DynamoDB takes in one `IN (…)`.
pub const MAX_STATES: usize = 100;

/// The largest item DynamoDB stores.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// A number as DynamoDB takes it.
pub(crate) fn number(n: impl ToString) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

/// What a write without a state condition requires the stored state to be.
///
/// The service can check a stored state's type and length but not its characters (no
/// expression tests for control or format characters, and listing them all would pass the
/// service's limit of 300 operators), so such a write is pinned to a state already read and
/// found valid: first "no state" (a new record), then, if the service refused because the item
/// has another state, the state its refusal returned. A write with a state condition needs no
/// pin: `#state IN (…)` admits only valid states.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum StatePin {
    /// The item has no state.
    #[default]
    Absent,
    /// The item's state is this one.
    Is(State),
}

/// One fenced `UpdateItem` on a record: condition, update, and the placeholders both use.
#[derive(Debug, Default)]
pub(crate) struct WriteExpression {
    pub(crate) condition: String,
    pub(crate) update: Option<String>,
    pub(crate) names: HashMap<String, String>,
    pub(crate) values: HashMap<String, AttributeValue>,
}

impl WriteExpression {
    /// The expressions of `write` with `token` on `table`, pinned to `pin` where the write has
    /// no state condition.
    ///
    /// The condition admits exactly what [`FencedWrite::decide`] admits, and refuses an item
    /// whose fence, state or payload this crate could not read back (a fence that is not a
    /// Number from 0 to `i64::MAX`, a state that is not a valid [`State`], a payload that is
    /// not Binary), so nothing is ever written over a value that could not be read.
    pub(crate) fn of(
        table: &DynamoTable,
        token: FencingToken,
        write: &FencedWrite,
        attributes: &[(String, AttributeValue)],
        pin: &StatePin,
    ) -> Result<Self, InvalidInput> {
        check_own_attributes(table, attributes)?;
        let mut expr = WriteExpression::default();
        for (placeholder, attribute) in [
            ("#key", table.key_attribute()),
            ("#fence", table.fence_attribute()),
            ("#state", table.state_attribute()),
            ("#payload", table.payload_attribute()),
        ] {
            expr.names.insert(placeholder.into(), attribute.into());
        }
        for (placeholder, value) in [
            (":token", number(token)),
            (":zero", number(0)),
            (":type_n", AttributeValue::S("N".into())),
            (":type_b", AttributeValue::S("B".into())),
        ] {
            expr.values.insert(placeholder.into(), value);
        }
        expr.condition = expr.condition_of(write, pin)?;
        expr.update = expr.update_of(write, attributes);
        // DynamoDB refuses a request that defines a placeholder its expressions do not use.
        let used = placeholders_in(&[&expr.condition, expr.update.as_deref().unwrap_or("")]);
        expr.names.retain(|name, _| used.contains(name.as_str()));
        expr.values.retain(|value, _| used.contains(value.as_str()));
        Ok(expr)
    }

    /// The condition: the fence check, a readable payload, and the states required (or the
    /// state pinned), their values added to the placeholders.
    fn condition_of(
        &mut self,
        write: &FencedWrite,
        pin: &StatePin,
    ) -> Result<String, InvalidInput> {
        let fence_ok = match write.check() {
            FenceCheck::Claim => {
                "(attribute_not_exists(#fence) OR (attribute_type(#fence, :type_n) \
                 AND #fence BETWEEN :zero AND :token))"
            }
            FenceCheck::HolderOnly => "#fence = :token",
        };
        let mut condition = vec![
            fence_ok.to_owned(),
            "(attribute_not_exists(#payload) OR attribute_type(#payload, :type_b))".to_owned(),
        ];
        match (write.required_states(), pin) {
            (Some(_), _) => {}
            (None, StatePin::Absent) => condition.push("attribute_not_exists(#state)".to_owned()),
            (None, StatePin::Is(state)) => {
                self.values
                    .insert(":pinned_state".into(), AttributeValue::S(state.to_string()));
                condition.push("#state = :pinned_state".to_owned());
            }
        }
        if let Some(required) = write.required_states() {
            if required.is_empty() || required.len() > MAX_STATES {
                return Err(InvalidInput::new(
                    InputKind::State,
                    format!(
                        "a state condition takes 1 to {MAX_STATES} states in DynamoDB, not {}",
                        required.len()
                    ),
                ));
            }
            let mut placeholders = Vec::with_capacity(required.len());
            for (i, state) in required.iter().enumerate() {
                let placeholder = format!(":required{i}");
                self.values
                    .insert(placeholder.clone(), AttributeValue::S(state.to_string()));
                placeholders.push(placeholder);
            }
            condition.push(format!(
                "attribute_exists(#key) AND #state IN ({})",
                placeholders.join(", ")
            ));
        }
        Ok(condition.join(" AND "))
    }

    /// The update: the fence (a claim), the new state and payload, and the write's own
    /// attributes, their values added to the placeholders; `None` when it sets nothing.
    fn update_of(
        &mut self,
        write: &FencedWrite,
        attributes: &[(String, AttributeValue)],
    ) -> Option<String> {
        let mut set: Vec<String> = Vec::new();
        if write.check() == FenceCheck::Claim {
            set.push("#fence = :token".into());
        }
        if let Some(state) = write.new_state() {
            self.values
                .insert(":new_state".into(), AttributeValue::S(state.to_string()));
            set.push("#state = :new_state".into());
        }
        if let Some(payload) = write.new_payload() {
            self.values.insert(
                ":new_payload".into(),
                AttributeValue::B(Blob::new(payload.to_vec())),
            );
            set.push("#payload = :new_payload".into());
        }
        for (i, (name, value)) in attributes.iter().enumerate() {
            self.names.insert(format!("#attribute{i}"), name.clone());
            self.values.insert(format!(":attribute{i}"), value.clone());
            set.push(format!("#attribute{i} = :attribute{i}"));
        }
        (!set.is_empty()).then(|| format!("SET {}", set.join(", ")))
    }
}

/// A write's own attributes may not be one the table's fenced write sets or checks itself.
fn check_own_attributes(
    table: &DynamoTable,
    attributes: &[(String, AttributeValue)],
) -> Result<(), InvalidInput> {
    // Only a write with attributes of its own pays for the list of the table's roles.
    let roles = if attributes.is_empty() {
        Vec::new()
    } else {
        table.roles()
    };
    for (name, _) in attributes {
        if let Some((_, role)) = roles.iter().find(|(attribute, _)| attribute == name) {
            return Err(InvalidInput::new(
                InputKind::Write,
                format!(
                    "attribute {name:?} is the table's {role} attribute, which the fenced \
                     write itself sets or checks"
                ),
            ));
        }
    }
    Ok(())
}

/// Every `#name` and `:value` placeholder the expressions use.
pub(crate) fn placeholders_in<'a>(expressions: &[&'a str]) -> std::collections::HashSet<&'a str> {
    let separator = |c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '#' | ':'));
    expressions
        .iter()
        .flat_map(|e| e.split(separator))
        .filter(|word| word.starts_with('#') || word.starts_with(':'))
        .collect()
}

/// Refuses a record whose key and payload alone could not fit in one item.
pub(crate) fn check_item_size(
    table: &DynamoTable,
    key: &str,
    write: &FencedWrite,
) -> Result<(), InvalidInput> {
    let payload = write.new_payload().map_or(0, <[u8]>::len);
    let state = write.new_state().map_or(0, |s| s.len());
    let estimate = table.key_attribute().len()
        + table.sort_key().map_or(0, |(name, _)| name.len())
        + key.len()
        + table.fence_attribute().len()
        + 21
        + table.state_attribute().len()
        + state
        + table.payload_attribute().len()
        + payload;
    if estimate > MAX_ITEM_BYTES {
        return Err(InvalidInput::new(
            InputKind::Identifier,
            format!(
                "the record {key:?} would take at least {estimate} bytes, over DynamoDB's item \
                 limit of {MAX_ITEM_BYTES}"
            ),
        ));
    }
    Ok(())
}

/// The fence condition of one write, to merge into an `UpdateItem` of your own: your condition
/// and this one must both hold, and a claim also sets the fence.
///
/// Its placeholders all start with `#fencing_` and `:fencing_`, and [`Self::merge_into`]
/// refuses a request whose own placeholders already use one of them, so nothing collides.
///
/// ```
/// use aws_sdk_dynamodb::types::AttributeValue;
/// # use fencing_core::adapter::HolderExt;
/// use fencing_core::{FenceCheck, FencingToken, Holder, MemoryTokenSource, ResourceName};
/// use fencing_dynamodb::DynamoFenceCondition;
///
/// # fn main() -> Result<(), fencing_core::InvalidInput> {
/// # let client = aws_sdk_dynamodb::Client::from_conf(
/// #     aws_sdk_dynamodb::Config::builder()
/// #         .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
/// #         .build(),
/// # );
/// # let resource = ResourceName::new("settle:m_4471")?;
/// # let holder = Holder::new(&resource, FencingToken::new(34).unwrap(), &MemoryTokenSource::new());
/// // `holder`: the guard's, `guard.holder()`.
/// let mine = client
///     .update_item()
///     .table_name("payouts")
///     .key("id", AttributeValue::S("p_815".into()))
///     .condition_expression("#status = :sending")
///     .update_expression("SET #status = :sent")
///     .expression_attribute_names("#status", "status")
///     .expression_attribute_values(":sending", AttributeValue::S("sending".into()))
///     .expression_attribute_values(":sent", AttributeValue::S("sent".into()));
/// let fenced = DynamoFenceCondition::new("fence", FenceCheck::HolderOnly, &holder).merge_into(mine)?;
/// assert_eq!(
///     fenced.get_condition_expression().as_deref(),
///     Some("(#status = :sending) AND (#fencing_fence = :fencing_token)")
/// );
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct DynamoFenceCondition {
    fence_attribute: String,
    check: FenceCheck,
    token: FencingToken,
}

impl DynamoFenceCondition {
    /// The condition of `check` with the holder's token on the Number attribute
    /// `fence_attribute`.
    pub fn new(fence_attribute: impl Into<String>, check: FenceCheck, holder: &Holder) -> Self {
        DynamoFenceCondition {
            fence_attribute: fence_attribute.into(),
            check,
            token: holder.token(),
        }
    }

    /// The condition expression, over this piece's own placeholders (without outer
    /// parentheses: DynamoDB refuses redundant ones).
    pub fn condition(&self) -> &'static str {
        match self.check {
            FenceCheck::Claim => {
                "attribute_not_exists(#fencing_fence) OR #fencing_fence BETWEEN :fencing_zero \
                 AND :fencing_token"
            }
            FenceCheck::HolderOnly => "#fencing_fence = :fencing_token",
        }
    }

    /// Adds this condition to `request` (`AND`ed with its own), sets the fence for a claim
    /// (appended to its `SET` clause, or as a new one), and adds the placeholders. Refuses a
    /// request that already uses a `#fencing_`/`:fencing_` placeholder.
    pub fn merge_into(
        &self,
        request: UpdateItemFluentBuilder,
    ) -> Result<UpdateItemFluentBuilder, InvalidInput> {
        let taken = request
            .get_expression_attribute_names()
            .iter()
            .flat_map(|names| names.keys())
            .chain(
                request
                    .get_expression_attribute_values()
                    .iter()
                    .flat_map(|values| values.keys()),
            )
            .find(|name| name.starts_with("#fencing_") || name.starts_with(":fencing_"));
        if let Some(taken) = taken {
            return Err(InvalidInput::new(
                InputKind::Identifier,
                format!("placeholder {taken:?} is reserved for the fence condition"),
            ));
        }
        let condition = match request.get_condition_expression() {
            Some(own) => format!("({own}) AND ({})", self.condition()),
            None => self.condition().to_owned(),
        };
        let mut request = request
            .condition_expression(condition)
            .expression_attribute_names("#fencing_fence", &self.fence_attribute)
            .expression_attribute_values(":fencing_token", number(self.token));
        if self.check == FenceCheck::Claim {
            let update = match request.get_update_expression() {
                Some(own) => merge_set(own, "#fencing_fence = :fencing_token"),
                None => "SET #fencing_fence = :fencing_token".to_owned(),
            };
            request = request
                .update_expression(update)
                .expression_attribute_values(":fencing_zero", number(0));
        }
        Ok(request)
    }
}

/// Adds `assignment` to the `SET` clause of `update`, or adds a `SET` clause. The clause is
/// the word `SET` (any case, between any ASCII whitespace) with something after it: adding a
/// second `SET` beside one written with a tab or a newline would have DynamoDB refuse the
/// request (the fuzz target `dynamodb_condition` found that this used to look for `"SET "`
/// only).
fn merge_set(update: &str, assignment: &str) -> String {
    let bytes = update.as_bytes();
    let keyword = (0..bytes.len().saturating_sub(3)).find(|&i| {
        bytes[i..i + 3].eq_ignore_ascii_case(b"SET")
            && (i == 0 || bytes[i - 1].is_ascii_whitespace())
            && bytes[i + 3].is_ascii_whitespace()
            && bytes[i + 3..].iter().any(|b| !b.is_ascii_whitespace())
    });
    match keyword {
        // After the keyword and one whitespace character, all ASCII: a char boundary.
        Some(at) => format!("{}{assignment}, {}", &update[..at + 4], &update[at + 4..]),
        None => format!("{update} SET {assignment}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_merged_into_an_existing_set_clause_or_adds_one() {
        assert_eq!(
            merge_set("SET #s = :s REMOVE #x", "#f = :t"),
            "SET #f = :t, #s = :s REMOVE #x"
        );
        assert_eq!(merge_set("REMOVE #x", "#f = :t"), "REMOVE #x SET #f = :t");
        assert_eq!(
            merge_set("REMOVE #x\nSET\t#s = :s", "#f = :t"),
            "REMOVE #x\nSET\t#f = :t, #s = :s"
        );
        assert_eq!(merge_set("set #s = :s", "#f = :t"), "set #f = :t, #s = :s");
        assert_eq!(merge_set("#OFFSET", "#f = :t"), "#OFFSET SET #f = :t");
        assert_eq!(
            merge_set("ADD #n :one", "#f = :t"),
            "ADD #n :one SET #f = :t"
        );
    }

    #[test]
    fn only_the_placeholders_the_expressions_use_are_sent() {
        let table = DynamoTable::new("refunds").unwrap();
        let confirm = FencedWrite::holder_only().set_state(State::new("sent").unwrap());
        let expr = WriteExpression::of(&table, FencingToken::MIN, &confirm, &[], &StatePin::Absent)
            .unwrap();
        assert!(!expr.names.contains_key("#key"), "{expr:?}");
        assert!(expr.values.contains_key(":new_state"));
        assert!(!expr.values.contains_key(":new_payload"));
        let claim = FencedWrite::claim().when_state_in([State::new("pending").unwrap()]);
        let expr =
            WriteExpression::of(&table, FencingToken::MIN, &claim, &[], &StatePin::Absent).unwrap();
        assert!(expr.names.contains_key("#key") && expr.values.contains_key(":required0"));
        let used = placeholders_in(&[&expr.condition, expr.update.as_deref().unwrap()]);
        assert_eq!(used.len(), expr.names.len() + expr.values.len());
    }

    #[test]
    fn more_than_a_hundred_states_are_refused_before_sending() {
        let table = DynamoTable::new("refunds").unwrap();
        let states: Vec<_> = (0..=MAX_STATES)
            .map(|i| State::new(format!("s{i}")).unwrap())
            .collect();
        let write = FencedWrite::claim().when_state_in(states);
        let err = WriteExpression::of(&table, FencingToken::MIN, &write, &[], &StatePin::Absent)
            .unwrap_err();
        assert_eq!(err.kind(), InputKind::State);
        let write = FencedWrite::claim().when_state_in([]);
        assert!(
            WriteExpression::of(&table, FencingToken::MIN, &write, &[], &StatePin::Absent).is_err()
        );
        let hundred: Vec<_> = (0..MAX_STATES)
            .map(|i| State::new(format!("s{i}")).unwrap())
            .collect();
        let write = FencedWrite::claim().when_state_in(hundred);
        let expression =
            WriteExpression::of(&table, FencingToken::MIN, &write, &[], &StatePin::Absent).unwrap();
        assert!(
            expression.condition.contains(":required99)"),
            "{}",
            expression.condition
        );
    }

    #[test]
    fn the_size_estimate_counts_every_name_and_value_the_item_will_hold() {
        let table = DynamoTable::new("ledger")
            .unwrap()
            .with_sort_key("entry", crate::DynamoKeyType::Number)
            .unwrap();
        let key = "m_4471|815";
        // "id" + "entry" + the key's text + "fence" + a Number's 21 at most + "state" +
        // "sending" + "payload": 2 + 5 + 10 + 5 + 21 + 5 + 7 + 7.
        let fixed = 62;
        let write = |payload: usize| {
            FencedWrite::claim()
                .set_state(State::new("sending").unwrap())
                .set_payload(vec![0u8; payload])
        };
        let at_limit = write(MAX_ITEM_BYTES - fixed);
        assert!(check_item_size(&table, key, &at_limit).is_ok());
        let over = write(MAX_ITEM_BYTES - fixed + 1);
        let err = check_item_size(&table, key, &over).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("at least {}", MAX_ITEM_BYTES + 1)),
            "{err}"
        );
    }

    #[test]
    fn an_item_over_the_limit_is_refused_before_sending() {
        let table = DynamoTable::new("refunds").unwrap();
        let big = FencedWrite::claim().set_payload(vec![0u8; MAX_ITEM_BYTES]);
        assert!(check_item_size(&table, "r_1", &big).is_err());
        let fits = FencedWrite::claim().set_payload(vec![0u8; MAX_ITEM_BYTES - 200]);
        assert!(check_item_size(&table, "r_1", &fits).is_ok());
    }
}
