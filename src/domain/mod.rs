//! The pure domain core: money, identifiers, statuses with their transition table, and the
//! decisions the store applies. No I/O and no clock here.

pub mod basket;
pub mod case;
pub mod case_evidence;
pub mod case_images;
pub mod catalog;
pub mod channel;
pub mod checkout;
pub mod contact;
pub mod decide;
pub mod event;
pub mod ids;
pub mod mail;
pub mod money;
pub mod promotion;
pub mod refund;
pub mod refusal;
pub mod retry;
pub mod shipping;
pub mod shop;
pub mod signin;
pub mod statement;
pub mod status;
pub mod subscribe;
pub mod webhook;

pub use money::{Currency, Money, MoneyError};
pub use status::{AttemptStatus, NotificationStatus, OrderStatus, ReservationStatus};
