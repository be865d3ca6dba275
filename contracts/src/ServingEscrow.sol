// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {IERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/IERC20Permit.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {SignatureChecker} from "@openzeppelin/contracts/utils/cryptography/SignatureChecker.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";

/// @title ServingEscrow
/// @notice Pays for a serving lease's requests without a transaction per request. A buyer
/// deposits SWARM for a provider once. Each request it sends carries a `Receipt` it signed
/// (EIP-712, checked by the provider's site, never by this contract); the site aggregates
/// receipts into a `Voucher` the buyer signs, whose `cumulative` only grows, and redeems it
/// here: the provider is paid `cumulative − redeemed` (as much of it as the deposit holds),
/// so a voucher may be redeemed late, in part, or once for many periods, and nothing is
/// paid twice.
///
/// A buyer takes back an unspent deposit in two steps: {thaw} names an amount, and
/// {withdraw} takes it once `thawPeriod` has passed. Until then the whole deposit stays
/// redeemable, so every voucher the buyer signed before the thaw ends can still be paid.
///
/// A voucher cannot be revoked. A buyer's signature is checked by ECDSA against its address
/// first, whatever code the address carries later (an EIP-7702 delegation included); a
/// contract wallet's ERC-1271 answer is asked only of a buyer that deposited as a contract
/// wallet, recorded at its deposit.
///
/// The contract has no admin, no fee and no pause: its token and thaw period are fixed at
/// construction, and no key but a buyer's signature moves a buyer's deposit.
/// @dev Invariants:
///  - token.balanceOf(this) == totalHeld == the sum of every pair's `balance`, unless
///    tokens are sent directly;
///  - for every (buyer, provider): deposited == balance + redeemed + withdrawn, and the
///    provider has been paid exactly `redeemed` for the pair;
///  - `redeemed` never decreases, and never exceeds the highest `cumulative` the buyer signed
///    for the pair;
///  - a withdrawal takes at most the thawed amount, never before its thaw has ended.
contract ServingEscrow is EIP712, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;

    /// @notice What a buyer signs with each request: `amount` owed to `provider` for it,
    /// a random `nonce`, and the second it was made. Checked off chain by the site.
    bytes32 public constant RECEIPT_TYPEHASH =
        keccak256("Receipt(address provider,uint128 amount,uint256 nonce,uint64 timestamp)");
    /// @notice What a buyer signs to aggregate its receipts: everything it owes `provider`
    /// since its first deposit, ever growing.
    bytes32 public constant VOUCHER_TYPEHASH =
        keccak256("Voucher(address buyer,address provider,uint128 cumulative)");
    /// @notice The longest thaw period a deployment may choose.
    uint64 public constant MAX_THAW_PERIOD = 30 days;
    /// @notice The shortest thaw period a deployment may choose: the time a provider's site
    /// has to see a thaw and redeem what the buyer signed before the buyer can withdraw it.
    uint64 public constant MIN_THAW_PERIOD = 1 hours;

    /// @dev One slot: what the pair holds now, and the cumulative value paid out of it.
    struct Account {
        uint128 balance;
        uint128 redeemed;
    }

    /// @dev One slot: the amount the buyer will withdraw, and when it may.
    struct Thaw {
        uint128 amount;
        uint64 endsAt;
    }

    IERC20 public immutable token;
    /// @notice How long a thawed deposit stays redeemable before its buyer may withdraw it.
    uint64 public immutable thawPeriod;

    /// @notice Tokens held for every pair together.
    uint256 public totalHeld;
    mapping(address buyer => mapping(address provider => Account)) internal _accounts;
    mapping(address buyer => mapping(address provider => Thaw)) internal _thaws;
    /// @notice Whether `buyer` deposited as a contract wallet (an account with code that is
    /// not an EIP-7702 delegation): only such a buyer's vouchers are checked by ERC-1271.
    mapping(address buyer => bool) public depositedAsContract;

    event Deposited(address indexed buyer, address indexed provider, uint256 amount);
    event ThawStarted(address indexed buyer, address indexed provider, uint256 amount, uint64 endsAt);
    event Withdrawn(address indexed buyer, address indexed provider, uint256 amount);
    /// @notice A voucher was redeemed: `paid` went to the provider, and `redeemed` is the
    /// pair's cumulative paid so far (at most the voucher's `cumulative`).
    event Redeemed(
        address indexed buyer, address indexed provider, uint256 cumulative, uint256 paid, uint256 redeemed
    );

    error ZeroAddress();
    error ZeroAmount();
    error ThawPeriodTooLong(uint64 period, uint64 max);
    error ThawPeriodTooShort(uint64 period, uint64 min);
    /// @notice The deposit holds less than the amount asked to thaw.
    error ThawExceedsBalance(uint256 amount, uint256 balance);
    error NothingThawing();
    error StillThawing(uint64 endsAt);
    /// @notice The voucher's signature is not the buyer's.
    error InvalidVoucherSignature();
    /// @notice The voucher asks for no more than has been redeemed already.
    error VoucherNotAbove(uint256 cumulative, uint256 redeemed);
    /// @notice The pair's deposit is empty: nothing of the voucher can be paid now.
    error DepositEmpty();
    error AmountTooLarge(uint256 amount);

    constructor(IERC20 token_, uint64 thawPeriod_) EIP712("SwarmServing", "1") {
        if (address(token_) == address(0)) revert ZeroAddress();
        if (thawPeriod_ > MAX_THAW_PERIOD) revert ThawPeriodTooLong(thawPeriod_, MAX_THAW_PERIOD);
        if (thawPeriod_ < MIN_THAW_PERIOD) revert ThawPeriodTooShort(thawPeriod_, MIN_THAW_PERIOD);
        token = token_;
        thawPeriod = thawPeriod_;
    }

    // ─── Buyers ──────────────────────────────────────────────────────────────

    /// @notice Adds `amount` to the caller's deposit for `provider`. Emits {Deposited}.
    function deposit(address provider, uint256 amount) external nonReentrant {
        _deposit(provider, amount);
    }

    /// @notice Like {deposit}, with an EIP-2612 permit instead of a prior approval. A permit
    /// already used is ignored if the allowance suffices.
    function depositWithPermit(address provider, uint256 amount, uint256 permitDeadline, uint8 v, bytes32 r, bytes32 s)
        external
        nonReentrant
    {
        try IERC20Permit(address(token)).permit(msg.sender, address(this), amount, permitDeadline, v, r, s) {} catch {}
        _deposit(provider, amount);
    }

    /// @notice Starts (or restarts) the thaw of `amount` of the caller's deposit for
    /// `provider`: {withdraw} may take it `thawPeriod` from now. A thaw of 0 cancels one.
    /// Emits {ThawStarted}.
    function thaw(address provider, uint256 amount) external {
        uint256 balance = _accounts[msg.sender][provider].balance;
        if (amount > balance) revert ThawExceedsBalance(amount, balance);
        uint64 endsAt = amount == 0 ? 0 : uint64(block.timestamp) + thawPeriod;
        _thaws[msg.sender][provider] = Thaw(uint128(amount), endsAt);
        emit ThawStarted(msg.sender, provider, amount, endsAt);
    }

    /// @notice Takes the thawed amount back once its thaw has ended, or what is left of it
    /// after the provider redeemed. Emits {Withdrawn}.
    function withdraw(address provider) external nonReentrant returns (uint256 amount) {
        Thaw memory t = _thaws[msg.sender][provider];
        if (t.amount == 0) revert NothingThawing();
        if (block.timestamp < t.endsAt) revert StillThawing(t.endsAt);
        delete _thaws[msg.sender][provider];
        Account storage account = _accounts[msg.sender][provider];
        amount = t.amount < account.balance ? t.amount : account.balance;
        account.balance -= uint128(amount);
        totalHeld -= amount;
        emit Withdrawn(msg.sender, provider, amount);
        if (amount > 0) token.safeTransfer(msg.sender, amount);
    }

    // ─── Providers ───────────────────────────────────────────────────────────

    /// @notice Pays `provider` what `buyer`'s voucher adds to what was redeemed before:
    /// `cumulative − redeemed`, or the whole deposit if it holds less (the rest stays
    /// redeemable with the same voucher). Anyone may send it; the provider is paid.
    /// `signature` is the buyer's over `Voucher(buyer, provider, cumulative)`: from its key
    /// (ECDSA, checked first and whatever code the buyer's address carries now) or, for a
    /// buyer that deposited as a contract wallet, its ERC-1271 answer. Emits {Redeemed}.
    function redeem(address buyer, address provider, uint128 cumulative, bytes calldata signature)
        external
        nonReentrant
        returns (uint256 paid)
    {
        Account memory account = _accounts[buyer][provider];
        if (cumulative <= account.redeemed) revert VoucherNotAbove(cumulative, account.redeemed);
        if (account.balance == 0) revert DepositEmpty();
        bytes32 digest = _hashTypedDataV4(keccak256(abi.encode(VOUCHER_TYPEHASH, buyer, provider, cumulative)));
        if (!_signedBy(buyer, digest, signature)) revert InvalidVoucherSignature();
        paid = cumulative - account.redeemed;
        if (paid > account.balance) paid = account.balance;
        unchecked {
            // paid <= balance, and redeemed + paid <= cumulative, a uint128
            account.balance -= uint128(paid);
            account.redeemed += uint128(paid);
            totalHeld -= paid;
        }
        _accounts[buyer][provider] = account;
        emit Redeemed(buyer, provider, cumulative, paid, account.redeemed);
        token.safeTransfer(provider, paid);
    }

    // ─── Views ───────────────────────────────────────────────────────────────

    /// @notice What the pair holds now, the cumulative value already paid out of it, and its
    /// thaw (amount and end; zero when none).
    function accountOf(address buyer, address provider)
        external
        view
        returns (uint256 balance, uint256 redeemed, uint256 thawing, uint64 thawEndsAt)
    {
        Account memory account = _accounts[buyer][provider];
        Thaw memory t = _thaws[buyer][provider];
        return (account.balance, account.redeemed, t.amount, t.endsAt);
    }

    /// @notice The EIP-712 digest a buyer signs for a voucher.
    function voucherDigest(address buyer, address provider, uint128 cumulative) external view returns (bytes32) {
        return _hashTypedDataV4(keccak256(abi.encode(VOUCHER_TYPEHASH, buyer, provider, cumulative)));
    }

    /// @notice The EIP-712 digest a buyer signs for a receipt.
    function receiptDigest(address provider, uint128 amount, uint256 nonce, uint64 timestamp)
        external
        view
        returns (bytes32)
    {
        return _hashTypedDataV4(keccak256(abi.encode(RECEIPT_TYPEHASH, provider, amount, nonce, timestamp)));
    }

    /// @notice The domain separator of receipts and vouchers ("SwarmServing", "1", this chain,
    /// this contract).
    function domainSeparator() external view returns (bytes32) {
        return _domainSeparatorV4();
    }

    // ─── Internal ────────────────────────────────────────────────────────────

    /// @dev The buyer's key signed `digest`, or the buyer deposited as a contract wallet and
    /// its wallet accepts the signature now. An EOA's voucher is never asked of its code, so
    /// no delegation it attaches later can disown it.
    function _signedBy(address buyer, bytes32 digest, bytes calldata signature) private view returns (bool) {
        (address recovered, ECDSA.RecoverError err,) = ECDSA.tryRecover(digest, signature);
        if (err == ECDSA.RecoverError.NoError && recovered == buyer) return true;
        return depositedAsContract[buyer] && SignatureChecker.isValidERC1271SignatureNow(buyer, digest, signature);
    }

    /// @dev Code that is not an EIP-7702 delegation designator (0xef0100 ‖ address): a
    /// delegated EOA keeps its key and is checked as one.
    function _isContractWallet(address account) private view returns (bool) {
        uint256 size = account.code.length;
        if (size == 0) return false;
        if (size != 23) return true;
        bytes memory code = account.code;
        return !(code[0] == 0xef && code[1] == 0x01 && code[2] == 0x00);
    }

    function _deposit(address provider, uint256 amount) private {
        if (provider == address(0)) revert ZeroAddress();
        if (amount == 0) revert ZeroAmount();
        // An account with a key (no code, or a delegation) reads and writes nothing here.
        if (_isContractWallet(msg.sender) && !depositedAsContract[msg.sender]) depositedAsContract[msg.sender] = true;
        Account storage account = _accounts[msg.sender][provider];
        // A pair's deposits, summed, stay within a uint128 (far above the token's supply).
        if (amount > type(uint128).max - account.balance - account.redeemed) revert AmountTooLarge(amount);
        account.balance += uint128(amount);
        totalHeld += amount;
        emit Deposited(msg.sender, provider, amount);
        token.safeTransferFrom(msg.sender, address(this), amount);
    }
}
